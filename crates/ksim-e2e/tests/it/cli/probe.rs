//! The hostile-caller probe: bad input sent to every RPC of every service `ksim up --autoscaler`
//! serves and to the CLI's verbs, failing on a panic, a hang or an unclear error. It is the
//! starting point of the next hardening round: add a case here when a new hole is found.
//!
//! The RPCs are enumerated from the descriptor set the services serve by reflection, and each
//! request is encoded from its message's descriptor, so a new RPC or field is probed without a
//! change here. A request is one of: empty, bytes that are no protobuf, or every field (nested
//! messages too, three levels deep) set to one of a list of hostile values (empty, huge, path
//! traversal, NUL, negative, NaN, out-of-range enums, forged provider IDs). The huge strings
//! must be refused with a bounded message, not echoed back whole.

use std::{
    collections::BTreeMap,
    io::Read,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use futures::StreamExt;
use prost::{
    Message,
    bytes::{Buf, BufMut},
};
use prost_types::{
    DescriptorProto, FieldDescriptorProto, FileDescriptorSet, field_descriptor_proto::Type,
};
use tonic::{
    Code, Status,
    codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder},
};

use super::common::up::Up;

/// No call here does work that takes long; one that has not answered by then hangs.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// A CLI verb that has not ended by then hangs (the environment's binaries are already built).
const VERB_TIMEOUT: Duration = Duration::from_secs(120);
/// Server-streamed answers read before the stream is dropped: a stream that answers is alive.
const STREAM_READ: usize = 3;

// ---- RPCs ----------------------------------------------------------------------------------

/// Bytes in, bytes out: the probe speaks protobuf from descriptors, not generated types.
#[derive(Clone, Copy, Default)]
struct RawCodec;

struct RawCoder;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCoder;
    type Decoder = RawCoder;

    fn encoder(&mut self) -> RawCoder {
        RawCoder
    }

    fn decoder(&mut self) -> RawCoder {
        RawCoder
    }
}

impl Encoder for RawCoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let mut bytes = vec![0; src.remaining()];
        src.copy_to_slice(&mut bytes);
        Ok(Some(bytes))
    }
}

/// One hostile value of each scalar kind, by variant.
struct Hostile {
    variant: usize,
}

impl Hostile {
    const VARIANTS: usize = 7;
    /// The variant whose strings are 1 MiB.
    const HUGE: usize = 6;

    fn string(&self) -> Vec<u8> {
        let values: [&[u8]; Self::VARIANTS] = [
            b"",
            b"../../../../../../etc/passwd",
            b"Bad_Name!!\0\xe2\x80\xae",
            b"ksim://m5/fixed-0",
            b"/dev/zero",
            b"-1",
            b"",
        ];
        match self.variant {
            // Huge: past any name or path limit, under the 4 MiB message limit.
            Self::HUGE => vec![b'x'; 1 << 20],
            variant => values[variant].to_vec(),
        }
    }

    fn varint(&self) -> u64 {
        [
            0,
            u64::MAX, // -1 as an int64
            i64::MIN as u64,
            i32::MAX as u64,
            u64::from(u32::MAX),
            1_000_000_000,
            (-2i64) as u64,
        ][self.variant]
    }

    fn double(&self) -> f64 {
        [
            f64::NAN,
            -1e300,
            1e300,
            f64::INFINITY,
            1e-300,
            -0.0,
            f64::NEG_INFINITY,
        ][self.variant]
    }
}

/// Every message of the descriptor set by full name (`.pkg.Message`), nested ones included.
fn messages(set: &FileDescriptorSet) -> BTreeMap<String, DescriptorProto> {
    fn add(prefix: &str, message: &DescriptorProto, into: &mut BTreeMap<String, DescriptorProto>) {
        let name = format!("{prefix}.{}", message.name());
        for nested in &message.nested_type {
            add(&name, nested, into);
        }
        into.insert(name, message.clone());
    }
    let mut all = BTreeMap::new();
    for file in &set.file {
        let prefix = if file.package().is_empty() {
            String::new()
        } else {
            format!(".{}", file.package())
        };
        for message in &file.message_type {
            add(&prefix, message, &mut all);
        }
    }
    all
}

fn put_varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_key(field: &FieldDescriptorProto, wire: u8, out: &mut Vec<u8>) {
    put_varint(
        (u64::try_from(field.number()).unwrap_or(0) << 3) | u64::from(wire),
        out,
    );
}

/// `message` with every field set to the variant's hostile value, nested messages to `depth`.
/// A repeated field gets the value once, unpacked: proto3 readers take both forms.
fn encode(
    all: &BTreeMap<String, DescriptorProto>,
    message: &DescriptorProto,
    hostile: &Hostile,
    depth: usize,
) -> Vec<u8> {
    let mut out = Vec::new();
    for field in &message.field {
        let zigzag = |v: u64| ((v as i64) << 1 ^ ((v as i64) >> 63)) as u64;
        match field.r#type() {
            Type::String => {
                let value = hostile.string();
                put_key(field, 2, &mut out);
                put_varint(value.len() as u64, &mut out);
                out.extend(value);
            }
            Type::Bytes => {
                let value = [0xff; 64];
                put_key(field, 2, &mut out);
                put_varint(value.len() as u64, &mut out);
                out.extend(value);
            }
            Type::Int32 | Type::Int64 | Type::Uint32 | Type::Uint64 => {
                put_key(field, 0, &mut out);
                put_varint(hostile.varint(), &mut out);
            }
            Type::Sint32 | Type::Sint64 => {
                put_key(field, 0, &mut out);
                put_varint(zigzag(hostile.varint()), &mut out);
            }
            Type::Bool => {
                put_key(field, 0, &mut out);
                put_varint(1, &mut out);
            }
            Type::Enum => {
                put_key(field, 0, &mut out);
                put_varint([99, u64::MAX, 1][hostile.variant % 3], &mut out);
            }
            Type::Double | Type::Fixed64 | Type::Sfixed64 => {
                put_key(field, 1, &mut out);
                let bits = if field.r#type() == Type::Double {
                    hostile.double().to_bits()
                } else {
                    hostile.varint()
                };
                out.extend(bits.to_le_bytes());
            }
            Type::Float | Type::Fixed32 | Type::Sfixed32 => {
                put_key(field, 5, &mut out);
                let bits = if field.r#type() == Type::Float {
                    (hostile.double() as f32).to_bits()
                } else {
                    hostile.varint() as u32
                };
                out.extend(bits.to_le_bytes());
            }
            Type::Message if depth > 0 => {
                let Some(nested) = all.get(field.type_name()) else {
                    continue;
                };
                let value = encode(all, nested, hostile, depth - 1);
                put_key(field, 2, &mut out);
                put_varint(value.len() as u64, &mut out);
                out.extend(value);
            }
            Type::Message | Type::Group => {}
        }
    }
    out
}

/// The most an error message may say: an oversized input is echoed as a bounded prefix.
const MESSAGE_MAX: usize = 1 << 10;

/// How one call ended, when it ended badly. `huge` is a request whose strings are 1 MiB: it
/// must be refused as bad input (not RESOURCE_EXHAUSTED, the sign of an answer echoing it
/// whole), with a bounded message.
fn judge(method: &str, request: &str, huge: bool, result: Result<(), Status>) -> Option<String> {
    let status = match result {
        Ok(()) => return None,
        Err(status) => status,
    };
    let message = status.message();
    if huge && (status.code() == Code::ResourceExhausted || message.len() > MESSAGE_MAX) {
        let prefix: String = message.chars().take(120).collect();
        return Some(format!(
            "{method} with {request}: {:?} with a {}-byte message {prefix:?}",
            status.code(),
            message.len()
        ));
    }
    let unclear = match status.code() {
        // A handler that panicked, a transport that broke, or an error nobody classified.
        Code::Unknown => true,
        // Bytes that are no protobuf are tonic's own Internal, with a clear message.
        Code::Internal => !message.starts_with("failed to decode Protobuf message"),
        _ => message.trim().is_empty() || message.contains("panicked"),
    };
    unclear.then(|| format!("{method} with {request}: {:?} {message:?}", status.code()))
}

enum Shape {
    Unary,
    ServerStream,
    ClientStream,
}

async fn call(
    channel: tonic::transport::Channel,
    path: &str,
    shape: &Shape,
    body: Vec<u8>,
) -> Result<(), Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(format!("not ready: {e}")))?;
    let path = http::uri::PathAndQuery::try_from(path.to_owned())
        .map_err(|e| Status::unknown(e.to_string()))?;
    match shape {
        Shape::Unary => {
            grpc.unary(tonic::Request::new(body), path, RawCodec)
                .await?;
        }
        Shape::ClientStream => {
            let requests = tokio_stream::iter(vec![body.clone(), body]);
            grpc.client_streaming(tonic::Request::new(requests), path, RawCodec)
                .await?;
        }
        Shape::ServerStream => {
            let mut stream = grpc
                .server_streaming(tonic::Request::new(body), path, RawCodec)
                .await?
                .into_inner();
            for _ in 0..STREAM_READ {
                match stream.next().await {
                    Some(answer) => {
                        answer?;
                    }
                    None => break,
                }
            }
        }
    }
    Ok(())
}

/// Every service's gRPC URL in the environment: the four services' from its state file.
fn service_urls(up: &Up) -> BTreeMap<&'static str, String> {
    let env: serde_json::Value =
        serde_json::from_slice(&std::fs::read(up.state.path().join("env.json")).unwrap()).unwrap();
    let url = |key: &str| env["urls"][key].as_str().unwrap().to_owned();
    BTreeMap::from([
        ("ksim.trace.v1", url("tracer")),
        ("ksim.vnode.v1", url("pool")),
        (
            "clusterautoscaler.cloudprovider.v1.externalgrpc",
            url("cloud_provider"),
        ),
        ("ksim.driver.v1", url("driver")),
        ("ksim.env.v1", url("environment")),
    ])
}

async fn probe_rpcs(up: &Up) -> Vec<String> {
    let set = FileDescriptorSet::decode(ksim_proto::FILE_DESCRIPTOR_SET).unwrap();
    let all = messages(&set);
    let urls = service_urls(up);
    let mut failures = Vec::new();
    let mut probed = 0;
    for file in &set.file {
        let Some(url) = urls.get(file.package()) else {
            continue;
        };
        let channel = tonic::transport::Endpoint::from_shared(url.clone())
            .unwrap()
            .connect_lazy();
        for service in &file.service {
            for method in &service.method {
                let path = format!("/{}.{}/{}", file.package(), service.name(), method.name());
                let shape = match (method.client_streaming(), method.server_streaming()) {
                    (false, false) => Shape::Unary,
                    (false, true) => Shape::ServerStream,
                    (true, false) => Shape::ClientStream,
                    (true, true) => panic!("{path}: no bidirectional RPC is probed yet"),
                };
                let input = &all[method.input_type()];
                let mut requests = vec![
                    ("an empty message".to_owned(), false, Vec::new()),
                    (
                        "bytes that are no protobuf".to_owned(),
                        false,
                        vec![0xff; 9],
                    ),
                ];
                requests.extend((0..Hostile::VARIANTS).map(|variant| {
                    let body = encode(&all, input, &Hostile { variant }, 3);
                    let huge = variant == Hostile::HUGE;
                    (format!("hostile values #{variant}"), huge, body)
                }));
                for (request, huge, body) in requests {
                    probed += 1;
                    let outcome = tokio::time::timeout(
                        CALL_TIMEOUT,
                        call(channel.clone(), &path, &shape, body),
                    )
                    .await;
                    let failure = match outcome {
                        Err(_) => Some(format!(
                            "{path} with {request}: no answer in {CALL_TIMEOUT:?}"
                        )),
                        Ok(result) => judge(&path, &request, huge, result),
                    };
                    failures.extend(failure);
                }
            }
        }
    }
    // 34 RPCs on the day this was written; fewer means the enumeration lost some.
    assert!(probed >= 34 * 9, "probed only {probed} requests");
    eprintln!(
        "probe: {probed} requests, {} unclear answers",
        failures.len()
    );
    // Every service still answers health after all of it.
    for (package, url) in &urls {
        let channel = tonic::transport::Endpoint::from_shared(url.clone())
            .unwrap()
            .connect_lazy();
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
        let serving = tokio::time::timeout(
            CALL_TIMEOUT,
            health.check(tonic_health::pb::HealthCheckRequest::default()),
        )
        .await;
        if !matches!(serving, Ok(Ok(_))) {
            failures.push(format!(
                "{package} at {url} no longer answers health: {serving:?}"
            ));
        }
    }
    failures
}

// ---- verbs ---------------------------------------------------------------------------------

/// A verb's bad input, and what its one error line must name.
struct Case {
    args: Vec<String>,
    names: String,
}

fn case(args: &[&str], names: &str) -> Case {
    Case {
        args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        names: names.to_owned(),
    }
}

/// `ksim ARGS` in the environment of `state`, killed when it hangs.
fn run_verb(state: &Path, case: &Case) -> Option<String> {
    let mut child = Command::new(ksim_e2e::binary("ksim"))
        .args(&case.args)
        .env("KSIM_STATE_DIR", state)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > VERB_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let said = reader.join().unwrap_or_default();
    let args = case.args.join(" ");
    let Some(status) = status else {
        return Some(format!("ksim {args}: no end in {VERB_TIMEOUT:?}"));
    };
    let last = said
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or("");
    if said.contains("panicked") {
        Some(format!("ksim {args}: panicked: {said}"))
    } else if status.success() {
        Some(format!("ksim {args}: succeeded on bad input: {said}"))
    } else if !last.starts_with("ksim: error: ") {
        Some(format!("ksim {args}: not one error line: {said}"))
    } else if !last.contains(&case.names) {
        Some(format!(
            "ksim {args}: the error does not name {:?}: {last}",
            case.names
        ))
    } else {
        None
    }
}

/// The bad inputs of the verbs that need no environment, and of those that do.
fn verb_cases(dir: &Path) -> Vec<Case> {
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let skeleton = path("m5.yaml");
    std::fs::write(&skeleton, ksim_localenv::fixtures::M5_LARGE_SKELETON).unwrap();
    let trace = path("demo.ktrace");
    let written = Command::new(ksim_e2e::binary("ksim"))
        .args(["demo", "--write-trace", &trace])
        .output()
        .unwrap();
    assert!(written.status.success(), "{written:?}");
    let write = |name: &str, text: &str| {
        let file = path(name);
        std::fs::write(&file, text).unwrap();
        file
    };
    let shift = write("shift.yaml", "rules:\n  - shiftTime: 100000000000h\n");
    let stretch = write("stretch.yaml", "rules:\n  - stretchTime: 1e300\n");
    let scale = write(
        "scale.yaml",
        "rules:\n  - match: 'kind == \"Deployment\"'\n    scaleReplicas: 1e300\n",
    );
    let rename = write(
        "rename.yaml",
        "rules:\n  - renameNamespace: { from: shop, to: 'Bad_Name!!' }\n",
    );
    let experiment = write(
        "experiment.yaml",
        &format!(
            "trace: {trace}\nspeed: 10\nnodeGroups: [\"small={skeleton}:2\"]\nvariants:\n- name: baseline\n"
        ),
    );
    let huge_skeleton = path("huge.yaml");
    std::fs::write(&huge_skeleton, vec![b'#'; 50 << 20]).unwrap();
    // Past the driver's 16 MiB request limit: the CLI says how to replay it instead.
    let big_trace = path("big.ktrace");
    std::fs::write(&big_trace, vec![0; 20 << 20]).unwrap();
    let out = path("out.ktrace");
    let missing = path("missing");
    let tmp = dir.to_str().unwrap();
    let m5 = |spec: &str| format!("m5={spec}");
    let mut cases = vec![
        // Files that are not traces, or not files.
        case(&["trace", "inspect", "/dev/zero"], "/dev/zero"),
        case(&["trace", "inspect", tmp], tmp),
        case(&["trace", "inspect", &missing], "missing"),
        case(&["trace", "show", "/dev/zero"], "/dev/zero"),
        case(&["trace", "validate", &missing], "missing"),
        case(&["trace", "convert", &missing, &out], "missing"),
        case(&["trace", "calibrate", "/dev/zero"], "/dev/zero"),
        case(&["trace", "calibrate", &missing], "missing"),
        // The demo's trace holds no recorded nodes: nothing to learn, and it says so.
        case(&["trace", "calibrate", &trace], "holds no recorded nodes"),
        // Outputs only to regular files or new paths.
        case(
            &["trace", "validate", &trace, "--fix", "/dev/null"],
            "/dev/null",
        ),
        case(&["trace", "convert", &trace, tmp], tmp),
        case(
            &["trace", "calibrate", &trace, "-o", "/dev/null"],
            "/dev/null",
        ),
        // Times and sizes out of range where they are made.
        case(
            &["trace", "transform", &trace, &out, "-f", &shift],
            "shiftTime",
        ),
        case(
            &["trace", "transform", &trace, &out, "-f", &stretch],
            "stretchTime",
        ),
        case(
            &["trace", "transform", &trace, &out, "-f", &scale],
            "scaleReplicas",
        ),
        case(
            &["trace", "transform", &trace, &out, "-f", &rename],
            "Bad_Name!!",
        ),
        case(
            &["trace", "generate", &out, "--start", "9999-12-31T23:00:00Z"],
            "--start",
        ),
        case(
            &[
                "trace",
                "generate",
                &out,
                "--node-cpu",
                "1e18",
                "--node-memory",
                "1E",
            ],
            "--node",
        ),
        case(&["trace", "import", "/dev/zero"], "/dev/zero"),
        case(&["trace", "import", &missing], "missing"),
        case(&["trace", "export", "-o", "/dev/null"], "/dev/null"),
        case(
            &["trace", "export", "-o", &out, "--start", "yesterday"],
            "--start",
        ),
        case(
            &["trace", "show", &trace, "--from", "not-a-time"],
            "not-a-time",
        ),
        case(&["trace", "explain", "KS999"], "KS999"),
        case(&["compare", "/nonexistent", tmp], "/nonexistent"),
        case(&["experiment", "run", "-f", "/dev/zero"], "/dev/zero"),
        case(&["experiment", "run", "-f", &missing], "missing"),
        case(
            &[
                "experiment",
                "run",
                "-f",
                &experiment,
                "--assert",
                "variants.zzz.cost <= 3",
            ],
            "zzz",
        ),
        // Replays: refused before anything is created.
        case(
            &["run", &trace, "--node-group", &m5("/dev/zero:3")],
            "/dev/zero",
        ),
        case(
            &[
                "run",
                &trace,
                "--node-group",
                &m5(&format!("{huge_skeleton}:3")),
            ],
            "huge.yaml",
        ),
        case(
            &[
                "run",
                &trace,
                "--node-group",
                &m5(&format!("{skeleton}:1000000")),
            ],
            "1000000",
        ),
        case(&["run", &trace, "--speed", "1e-300"], "speed"),
        case(&["run", &trace, "--speed", "NaN"], "speed"),
        case(&["run", &missing], "missing"),
        case(&["run", &big_trace], "ksim trace import"),
        case(&["run", "/dev/zero"], "/dev/zero"),
        case(
            &[
                "run",
                &trace,
                "--autoscaler-arg",
                "log-file=/etc/ksim-probe",
            ],
            "log-file",
        ),
        case(
            &[
                "run",
                &trace,
                "--autoscaler-arg",
                "kubernetes=https://example.invalid",
            ],
            "kubernetes",
        ),
        case(&["report", "../../../etc/passwd"], "../../../etc/passwd"),
    ];
    // A trace's file name as the trace id, so the error can name it.
    cases.push(case(
        &["run", "--stored", "--trace-id", "no-such-trace"],
        "no-such-trace",
    ));
    cases
}

#[tokio::test(flavor = "multi_thread")]
async fn every_rpc_and_verb_answers_bad_input_with_a_clear_error() {
    let up = tokio::task::spawn_blocking(|| Up::start(&["--autoscaler"]))
        .await
        .unwrap();
    let mut failures = probe_rpcs(&up).await;
    let state = up.state.path().to_owned();
    let verbs = tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        verb_cases(dir.path())
            .iter()
            .filter_map(|case| run_verb(&state, case))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    failures.extend(verbs);
    let said = up.said();
    if said.contains("panicked") {
        failures.push(format!("ksim up's services panicked: {said}"));
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
