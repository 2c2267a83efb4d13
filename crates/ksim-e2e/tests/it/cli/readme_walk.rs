//! The README's "Five minutes with ksim", run as written: the commands are read from the
//! README itself, so a walk that stops working fails here rather than on a newcomer.
//!
//! What cannot run as written is replaced, and only that: the binaries are the tests' own
//! (the walk's `cargo build --release`), `ksim up` gets a port base of its own (the tests run
//! side by side), the "real cluster" the tracer records is the environment's own (its
//! kubeconfig, a free port, a temporary data directory), and `<id>`s are the runs' ids.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::common::up::{Up, run_id};

/// One step of the walk.
#[derive(Debug)]
enum Step {
    /// A command line, continuations joined and the comment dropped.
    Command(String),
    /// `cat > FILE <<'END'` and the lines up to `END`: a file the walk writes.
    File { name: String, text: String },
}

/// The README's walk: the steps of its `sh` code blocks.
fn walk() -> Vec<Step> {
    let readme = include_str!("../../../../../README.md");
    let section = readme
        .split("\n## ")
        .find(|section| section.starts_with("Five minutes with ksim"))
        .expect("the README has its five-minute walk");
    let mut lines = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    let mut heredoc: Option<(String, String, String)> = None;
    for line in section.lines() {
        if let Some((name, end, mut text)) = heredoc.take() {
            if line == end {
                lines.push(Step::File { name, text });
            } else {
                text.push_str(line);
                text.push('\n');
                heredoc = Some((name, end, text));
            }
            continue;
        }
        if line.starts_with("```") {
            in_block = line == "```sh";
            continue;
        }
        if !in_block {
            continue;
        }
        if let Some((name, end)) = line
            .strip_prefix("cat > ")
            .and_then(|rest| rest.split_once(" <<"))
        {
            heredoc = Some((
                name.to_owned(),
                end.trim_matches('\'').to_owned(),
                String::new(),
            ));
            continue;
        }
        let line = line.split(" #").next().unwrap_or_default().trim();
        if let Some(start) = line.strip_suffix('\\') {
            pending.push_str(start);
            continue;
        }
        pending.push_str(line);
        let command = std::mem::take(&mut pending);
        if !command.is_empty() {
            lines.push(Step::Command(
                command.split_whitespace().collect::<Vec<_>>().join(" "),
            ));
        }
    }
    assert!(heredoc.is_none(), "a file the walk never ends");
    lines
}

/// A command line's words; `'...'` is one word.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut quoted = false;
    let mut word = String::new();
    for c in line.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => words.push(std::mem::take(&mut word)),
            c => word.push(c),
        }
    }
    words.push(word);
    words.retain(|word| !word.is_empty());
    words
}

/// `ksim ARGS` in the walk's working directory and the environment of `up`; must succeed. A
/// `run` keeps the model a user's run gets (unlike the tests' `pinned` runs).
fn ksim(up: &Up, cwd: &Path, args: &[String]) -> String {
    let output = Command::new(ksim_e2e::binary("ksim"))
        .args(args)
        .current_dir(cwd)
        .env("KSIM_STATE_DIR", up.state.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "ksim {args:?}: {printed}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    printed
}

/// Stops the walk's background tracer with the test.
struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_walk_runs_as_written() {
    // A step the runner does not know fails it, and it checks at the end that every verb of
    // the walk ran.
    let walk = walk();
    tokio::task::block_in_place(|| run_walk(&walk));
}

fn run_walk(walk: &[Step]) {
    let cwd = tempfile::tempdir().unwrap();
    // The walk names the example skeleton by its path in a checkout.
    let skeleton = cwd.path().join("deploy/vnode/examples");
    std::fs::create_dir_all(&skeleton).unwrap();
    std::fs::write(
        skeleton.join("skeleton-m5-large.yaml"),
        ksim_localenv::fixtures::M5_LARGE_SKELETON,
    )
    .unwrap();
    let mut up: Option<Up> = None;
    let mut tracer: Option<Background> = None;
    // The tracer's address as the walk writes it, and as it runs here.
    let mut tracer_address: Option<(String, String)> = None;
    let mut ids: Vec<String> = Vec::new();
    let mut ran = Vec::new();
    for step in walk {
        let line = match step {
            Step::Command(line) => line,
            Step::File { name, text } => {
                std::fs::write(cwd.path().join(name), text).unwrap();
                ran.push(format!("cat > {name}"));
                continue;
            }
        };
        let line_words = words(line);
        let (program, args) = line_words.split_first().unwrap();
        match program.as_str() {
            "cargo" => {
                // The binaries: the tests' own, built by ksim_e2e::binary.
                assert!(line.starts_with("cargo build"), "{line}");
                continue;
            }
            "ksim-tracer" => {
                let data = cwd.path().join("tracer");
                let kubeconfig = up.as_ref().expect("ksim up first").kubeconfig();
                let mut args: Vec<String> = args
                    .iter()
                    .filter(|arg| *arg != "&")
                    .map(|arg| match arg.as_str() {
                        "/tmp/tracer" => data.display().to_string(),
                        "~/.kube/config" => kubeconfig.display().to_string(),
                        arg if arg.starts_with("127.0.0.1:") => {
                            let here = format!("127.0.0.1:{}", ksim_e2e::port_base());
                            tracer_address = Some((arg.to_owned(), here.clone()));
                            here
                        }
                        arg => arg.to_owned(),
                    })
                    .collect();
                args.extend(["--admin-addr".to_owned(), "127.0.0.1:0".to_owned()]);
                let (_, address) = tracer_address.clone().expect("the walk gives --grpc-addr");
                let child = Command::new(ksim_e2e::binary("ksim-tracer"))
                    .args(&args)
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(cwd.path().join("tracer.log")).unwrap())
                    .spawn()
                    .unwrap();
                tracer = Some(Background(child));
                // What the walk's export asks for must exist: a Deployment in `shop`, recorded.
                let up = up.as_ref().unwrap();
                ksim(up, cwd.path(), &words("kubectl create namespace shop"));
                ksim(
                    up,
                    cwd.path(),
                    &words("kubectl -n shop create deployment web --image=nginx"),
                );
                wait_for_export(up, cwd.path(), &address);
                ran.push(line.clone());
                continue;
            }
            "ksim" => {}
            other => panic!("the walk runs {other}, which this test does not know: {line}"),
        }
        let mut args: Vec<String> = args.to_vec();
        for arg in &mut args {
            if let Some((written, here)) = &tracer_address {
                *arg = arg.replace(written.as_str(), here);
            }
            match arg.as_str() {
                "<id>" => *arg = ids.last().expect("a run before its report").clone(),
                "<first-id>" => *arg = ids[0].clone(),
                "<second-id>" => *arg = ids[1].clone(),
                _ => {}
            }
        }
        match args.first().map(String::as_str) {
            Some("up") => {
                let args: Vec<&str> = args[1..].iter().map(String::as_str).collect();
                up = Some(Up::start(&args));
            }
            Some(_) => {
                let up = up.as_ref().expect("the walk starts ksim up first");
                let printed = ksim(up, cwd.path(), &args);
                match args[0].as_str() {
                    "run" => ids.push(run_id(&printed).to_owned()),
                    "report" => assert!(printed.contains("pod pending time:"), "{printed}"),
                    "compare" => assert!(printed.contains("node_hours"), "{printed}"),
                    "experiment" => assert!(printed.contains("assert ok:"), "{printed}"),
                    "trace" if args.get(1).is_some_and(|verb| verb == "inspect") => {
                        assert!(printed.contains("Deployment"), "{printed}");
                    }
                    _ => {}
                }
            }
            None => panic!("an empty ksim line: {line}"),
        }
        ran.push(line.clone());
    }
    // Two runs, the report of one and their comparison, the recording exported and inspected.
    assert_eq!(ids.len(), 2, "{ran:#?}");
    assert!(tracer.is_some(), "{ran:#?}");
    for verb in [
        "ksim up",
        "ksim trace export",
        "ksim demo --write-trace",
        "ksim trace inspect",
        "ksim run",
        "ksim report",
        "ksim compare",
        "cat > experiment.yaml",
        "ksim experiment run",
    ] {
        assert!(
            ran.iter().any(|line| line.starts_with(verb)),
            "{verb}: {ran:#?}"
        );
    }
    // The walk's last word: `ksim down` stops the environment.
    let up = up.unwrap();
    let down = ksim(&up, cwd.path(), &words("down"));
    assert!(!up.state.path().join("env.json").exists(), "{down}");
}

/// Until the tracer has recorded the Deployment: an export of `shop` that holds it.
fn wait_for_export(up: &Up, cwd: &Path, address: &str) {
    let started = Instant::now();
    let out = cwd.join("probe.ktrace");
    loop {
        let output = Command::new(ksim_e2e::binary("ksim"))
            .args(["trace", "export", "--server", &format!("http://{address}")])
            .args(["-n", "shop", "-o"])
            .arg(&out)
            .env("KSIM_STATE_DIR", up.state.path())
            .output()
            .unwrap();
        if output.status.success() {
            let inspected = ksim(
                up,
                cwd,
                &["trace".into(), "inspect".into(), out.display().to_string()],
            );
            if inspected.contains("Deployment") {
                let _ = std::fs::remove_file(&out);
                return;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the tracer recorded nothing: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let _ = std::fs::remove_file(&out);
        std::thread::sleep(Duration::from_secs(1));
    }
}
