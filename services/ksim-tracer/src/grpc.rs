//! The `ksim.trace.v1.TraceStore` gRPC service: requests checked and mapped onto the store,
//! errors mapped to status codes. Bad input is INVALID_ARGUMENT with a message naming the field.

use std::{path::PathBuf, sync::Arc};

use ksim_grpc::input::{VALUE_MAX, check_len, check_name, check_trace_filter};
use ksim_proto::ksim::trace::v1::{self as pb, trace_store_server::TraceStore};
use ksim_trace::time::{self, now_ms};
use tokio::sync::mpsc;
use tokio_stream::{StreamExt, wrappers::ReceiverStream};
use tonic::{Request, Response, Status, Streaming};

use crate::{
    domain::{export::Window, filter::Filter},
    exporter::{Export, ExportError, Source},
    imports::{ImportError, Imports},
    spill::Spill,
    store::{Store, StoreError},
};

/// Chunk size when the client leaves it to the server, and the most it may ask for (well
/// under the 4 MiB default message limit of gRPC clients).
const DEFAULT_CHUNK_BYTES: usize = 1 << 20;
const MAX_CHUNK_BYTES: usize = 3 << 20;

#[derive(Debug, Clone)]
pub struct TraceStoreService {
    store: Arc<Store>,
    imports: Imports,
    created_by: String,
    origin: String,
    spill_dir: PathBuf,
}

impl TraceStoreService {
    pub fn new(store: Arc<Store>, imports: Imports, origin: String) -> Self {
        let created_by = format!("ksim-tracer {}", env!("CARGO_PKG_VERSION"));
        Self {
            store,
            imports,
            created_by,
            origin,
            spill_dir: std::env::temp_dir(),
        }
    }

    /// Where exports sort windows too long for memory; the system's temporary directory unless
    /// set (which may be memory-backed: the tracer gives its data directory).
    pub fn spill_dir(mut self, dir: PathBuf) -> Self {
        self.spill_dir = dir;
        self
    }

    pub fn into_server(self) -> pb::trace_store_server::TraceStoreServer<Self> {
        pb::trace_store_server::TraceStoreServer::new(self)
    }

    fn plan_export(&self, request: &pb::ExportRequest) -> Result<Export, Status> {
        check_name("trace_id", &request.trace_id)?;
        if let Some(filter) = &request.filter {
            check_trace_filter("filter", filter)?;
        }
        let filter = Filter::from_proto(request.filter.as_ref())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let chunk_bytes = match request.chunk_size_bytes as usize {
            0 => DEFAULT_CHUNK_BYTES,
            n => n.min(MAX_CHUNK_BYTES),
        };
        // Without an end: the live recording's is now (it is still being recorded), an
        // imported trace's is where its recording ended.
        let (source, oldest_ms, newest_ms, origin, tracer_config) = if request.trace_id.is_empty() {
            let snapshot = self.store.snapshot().map_err(store_status)?;
            let stats = self.store.log_stats().map_err(store_status)?;
            let oldest = stats.edge_ms.or(stats.oldest_ms).unwrap_or_else(now_ms);
            (
                Source::Log(snapshot),
                oldest,
                now_ms() + 1,
                self.origin.clone(),
                Some(self.store.tracer_config()),
            )
        } else {
            let path = self
                .imports
                .path(&request.trace_id)
                .map_err(import_status)?;
            let meta = self
                .imports
                .meta(&request.trace_id)
                .map_err(import_status)?;
            let tracer_config = self
                .imports
                .tracer_config(&request.trace_id)
                .map_err(import_status)?;
            let oldest = meta.first_event_ms.unwrap_or(0);
            (
                Source::Imported(path),
                oldest,
                meta.default_end_ms().unwrap_or(oldest.saturating_add(1)),
                format!(
                    "imported trace {} ({})",
                    request.trace_id, meta.display_name
                ),
                tracer_config,
            )
        };
        let start_ms = request.start_time.as_ref().map_or(oldest_ms, time::millis);
        let end_ms = request.end_time.as_ref().map_or(newest_ms, time::millis);
        // The trace format holds 1970 to 9999 only: refused here, not by the writer mid-export.
        for (field, ms) in [("start_time", start_ms), ("end_time", end_ms)] {
            if !time::in_range(ms) {
                return Err(Status::invalid_argument(format!(
                    "{field}: {ms} ms is outside the times a trace can hold (1970 to 9999)"
                )));
            }
        }
        let window = Window::new(start_ms, end_ms)
            .map_err(|e| Status::invalid_argument(format!("start_time/end_time: {e}")))?;
        let header = pb::TraceHeader {
            format_version: ksim_trace::FORMAT_VERSION,
            tracer_config,
            start_time: Some(time::timestamp(window.start_ms)),
            end_time: Some(time::timestamp(window.end_ms)),
            created_by: self.created_by.clone(),
            create_time: Some(time::timestamp(now_ms())),
            origin,
            transforms: Vec::new(),
        };
        Ok(Export {
            source,
            window,
            filter,
            header,
            chunk_bytes,
            spill: Spill::new(self.spill_dir.clone()),
        })
    }
}

#[tonic::async_trait]
impl TraceStore for TraceStoreService {
    type ExportStream = ReceiverStream<Result<pb::ExportResponse, Status>>;

    async fn export(
        &self,
        request: Request<pb::ExportRequest>,
    ) -> Result<Response<Self::ExportStream>, Status> {
        let export = self.plan_export(request.get_ref())?;
        let (chunks, receiver) = mpsc::channel(4);
        let errors = chunks.clone();
        tokio::task::spawn_blocking(move || match export.run(chunks) {
            Ok(_) | Err(ExportError::Disconnected) => {}
            Err(error) => {
                tracing::error!(%error, "export failed");
                let _ =
                    errors.blocking_send(Err(Status::internal(format!("export failed: {error}"))));
            }
        });
        Ok(Response::new(ReceiverStream::new(receiver)))
    }

    async fn import(
        &self,
        request: Request<Streaming<pb::ImportRequest>>,
    ) -> Result<Response<pb::ImportResponse>, Status> {
        let mut messages = request.into_inner();
        let mut upload = self.imports.begin().map_err(import_status)?;
        let mut first: Option<(pb::TraceFormat, String)> = None;
        while let Some(message) = messages.next().await {
            let message = message?;
            if first.is_none() {
                check_len("display_name", &message.display_name, VALUE_MAX)?;
                let format = pb::TraceFormat::try_from(message.format).map_err(|_| {
                    Status::invalid_argument(format!(
                        "format: {} is not a TraceFormat",
                        message.format
                    ))
                })?;
                first = Some((format, message.display_name.clone()));
            }
            upload.write(&message.data).map_err(import_status)?;
        }
        let (format, display_name) = first.ok_or_else(|| {
            Status::invalid_argument("the upload is empty: no messages were sent")
        })?;
        let received = upload.received();
        let (trace_id, meta) =
            tokio::task::spawn_blocking(move || upload.finish(format, &display_name))
                .await
                .map_err(|e| Status::internal(e.to_string()))?
                .map_err(import_status)?;
        Ok(Response::new(pb::ImportResponse {
            trace_id,
            summary: Some(pb::TraceSummary {
                events: meta.events,
                objects: meta.objects,
                lifecycles: meta.lifecycles,
                start_time: meta.first_event_ms.map(time::timestamp),
                end_time: meta.last_event_ms.map(time::timestamp),
            }),
            bytes_received: received,
        }))
    }

    async fn stats(
        &self,
        request: Request<pb::StatsRequest>,
    ) -> Result<Response<pb::StatsResponse>, Status> {
        let trace_id = request.into_inner().trace_id;
        check_name("trace_id", &trace_id)?;
        if !trace_id.is_empty() {
            return self.imported_stats(&trace_id).await.map(Response::new);
        }
        let stats = self.store.log_stats().map_err(store_status)?;
        let kinds = self
            .store
            .kinds()
            .iter()
            .map(|kind| {
                let gvk = kind.gvk();
                let totals = stats
                    .kinds
                    .get(&ksim_trace::gvk::display(&gvk))
                    .cloned()
                    .unwrap_or_default();
                pb::KindStats {
                    objects: self.store.object_count(kind.group(), &kind.kind),
                    events: totals.applies + totals.deletes,
                    applies: totals.applies,
                    deletes: totals.deletes,
                    lifecycles: totals.lifecycles,
                    gvk: Some(gvk),
                }
            })
            .collect();
        Ok(Response::new(pb::StatsResponse {
            events: stats.events,
            bytes_on_disk: stats.bytes_on_disk,
            oldest_event_time: stats.edge_ms.or(stats.oldest_ms).map(time::timestamp),
            newest_event_time: stats.newest_ms.map(time::timestamp),
            kinds,
            lifecycles: stats.lifecycles,
            segments: stats.segments,
        }))
    }

    async fn list_tracked_kinds(
        &self,
        _request: Request<pb::ListTrackedKindsRequest>,
    ) -> Result<Response<pb::ListTrackedKindsResponse>, Status> {
        let statuses = self.store.statuses().get();
        let kinds = self
            .store
            .kinds()
            .iter()
            .zip(statuses)
            .map(|(kind, status)| pb::TrackedKind {
                config: Some(kind.to_proto(&status.plural, status.namespaced)),
                state: status.state.into(),
                message: status.message,
                state_change_time: Some(prost_types::Timestamp::from(status.since)),
                objects: self.store.object_count(kind.group(), &kind.kind),
            })
            .collect();
        Ok(Response::new(pb::ListTrackedKindsResponse { kinds }))
    }
}

impl TraceStoreService {
    async fn imported_stats(&self, trace_id: &str) -> Result<pb::StatsResponse, Status> {
        let path = self.imports.path(trace_id).map_err(import_status)?;
        let meta = self.imports.meta(trace_id).map_err(import_status)?;
        let inspection = tokio::task::spawn_blocking(move || {
            std::fs::File::open(&path)
                .map_err(ksim_trace::TraceError::Io)
                .and_then(|file| ksim_trace::inspect::inspect(std::io::BufReader::new(file)))
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(|e| {
            Status::data_loss(format!("the stored trace {trace_id} is unreadable: {e}"))
        })?;
        let kinds = inspection
            .kinds
            .iter()
            .map(|(name, counts)| pb::KindStats {
                gvk: ksim_trace::gvk::parse(name).ok(),
                objects: counts.objects,
                events: counts.applies + counts.deletes,
                applies: counts.applies,
                deletes: counts.deletes,
                lifecycles: counts.lifecycles,
            })
            .collect();
        Ok(pb::StatsResponse {
            events: inspection.events,
            bytes_on_disk: meta.bytes,
            oldest_event_time: inspection.first_event_ms.map(time::timestamp),
            newest_event_time: inspection.last_event_ms.map(time::timestamp),
            kinds,
            lifecycles: inspection.lifecycles,
            segments: 1,
        })
    }
}

fn import_status(error: ImportError) -> Status {
    match error {
        ImportError::NotFound(_) => Status::not_found(error.to_string()),
        ImportError::Io(_) | ImportError::Meta { .. } => Status::internal(error.to_string()),
        ImportError::TooLarge { .. }
        | ImportError::Empty
        | ImportError::UnknownFormat(_)
        | ImportError::Invalid { .. }
        | ImportError::BadId(_) => Status::invalid_argument(error.to_string()),
    }
}

fn store_status(error: StoreError) -> Status {
    Status::unavailable(format!("the tracer's log is unavailable: {error}"))
}
