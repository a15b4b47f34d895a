//! The operator API (JSON): list and show packages, upload a package archive, call a tool.
//!
//! - `GET /v1/packages` → `{"packages":[{"name","version","description","tools":[names]}]}`
//! - `GET /v1/packages/{name}` → the stored record and the full discovered tools
//! - `POST /v1/packages` (body: a `.tar.gz`) → check, precompile, discovery and store, as
//!   `hako upload`: 201 with the summary and tools when stored, 200 when the same version was
//!   already stored, 422 `{"refused":true,"problems":[{"rule","message"}]}` when refused
//! - `POST /v1/packages/{name}/call` with `{"tool","arguments","limits"}` → 200 and the outcome
//!   object of `hako call --json` (a crash is an outcome, not an HTTP error); 404 for an
//!   unknown package or tool, 503 with `Retry-After` when the call queue is full
//!
//! Uploads run one at a time on a blocking thread (compiling is heavy); calls go through
//! [`super::calls`]. This file does not check or store packages itself.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{json, Value};

use super::access::Origin;
use super::body;
use super::calls::CallError;
use super::fault;
use super::mcp::{nesting_exceeds, MAX_NESTING};
use super::response::{self, problem, Body};
use super::roles::Caller;
use super::server::Server;
use crate::compile::CompileError;
use crate::package::{self, LoadError};
use crate::store::remote::RemoteError;
use crate::store::{PutResult, StoreError};
use crate::upload::{self, UploadError, UploadOptions};

/// `GET /v1/packages`.
pub fn list(server: &Server, caller: Caller<'_>) -> Response<Body> {
    let names = match server.calls.store().list() {
        Ok(names) => names,
        Err(err) => return response::internal(&err),
    };
    let packages: Vec<Value> = names
        .iter()
        .filter(|name| caller.may_use(name))
        .filter_map(|name| server.calls.package(name).ok())
        .map(|served| {
            let record = &served.stored.record;
            json!({
                "name": record.name,
                "version": record.version,
                "description": record.description,
                "origin": record.origin,
                "tools": served.stored.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            })
        })
        .collect();
    response::json(StatusCode::OK, &json!({ "packages": packages }))
}

/// `GET /v1/packages/{name}`.
pub fn show(server: &Server, name: &str) -> Response<Body> {
    match server.calls.package(name) {
        Ok(served) => {
            let record = &served.stored.record;
            response::json(
                StatusCode::OK,
                &json!({
                    "name": record.name,
                    "version": record.version,
                    "description": record.description,
                    "module_sha256": record.module_sha256,
                    "engines": record.engines,
                    "origin": record.origin,
                    "tools": served.stored.tools,
                }),
            )
        }
        Err(err) => response::not_served(&err),
    }
}

/// Why an upload stored nothing, before it becomes a response.
enum UploadFailure {
    /// The package broke these rules (`[{"rule","message"}]`).
    Refused(Value),
    /// The host failed.
    Internal(String),
    /// The machine was too busy to compile now (503, `Retry-After`).
    Busy(String),
}

impl UploadFailure {
    fn internal(err: &(dyn std::error::Error + 'static)) -> Self {
        UploadFailure::Internal(fault::report(err))
    }

    fn response(self) -> Response<Body> {
        match self {
            UploadFailure::Refused(problems) => response::json(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({"refused": true, "problems": problems}),
            ),
            UploadFailure::Internal(message) => {
                problem(StatusCode::INTERNAL_SERVER_ERROR, &message)
            }
            UploadFailure::Busy(message) => {
                response::busy("application/json", json!({ "error": message }).to_string())
            }
        }
    }
}

/// `POST /v1/packages`: the body is streamed to a file in the store's staging folder, never
/// held in memory, and the bytes all uploads may have in flight at once are bounded
/// (`--max-upload-in-flight`; 503 beyond, before anything is read).
pub async fn upload(server: &Arc<Server>, request: Request<Incoming>) -> Response<Body> {
    let max = server.config.max_upload_bytes;
    // A body of unknown length may take up to the largest upload, and so may a pull.
    let reserved = match body::declared_length(&request) {
        Some(length) if !is_json(&request) => length.min(max as u64),
        _ => max as u64,
    };
    let Some(_in_flight) = server.upload_budget.reserve(reserved) else {
        return response::busy(
            "application/json",
            json!({"error": format!(
                "uploads in flight already hold what this server allows ({} bytes, hako serve \
                 --max-upload-in-flight); try again shortly",
                server.upload_budget.total()
            )})
            .to_string(),
        );
    };
    let store = server.calls.store().clone();
    let staging = match store.staging() {
        Ok(staging) => staging,
        Err(err) => return response::internal(&err),
    };
    let source = if is_json(&request) {
        match fetch(server, request, &staging).await {
            Ok(fetched) => Source::Pulled(Box::new(fetched)),
            Err(response) => return response,
        }
    } else {
        match receive(server, request, &staging).await {
            Ok(archive) => Source::Archive(archive),
            Err(response) => return response,
        }
    };
    let _one_at_a_time = server.uploads.lock().await;
    // On a bucket, no fetch touches the cache between storing the version there and
    // publishing it.
    let held = match &server.follower {
        Some(follower) => Some((follower, follower.exclusive().await)),
        None => None,
    };
    let work = tokio::task::spawn_blocking(move || -> Result<Stored, UploadFailure> {
        let internal = UploadFailure::internal;
        let loaded = match source {
            Source::Archive(archive) => package::load_in(archive.path(), &staging),
            Source::Pulled(fetched) => fetched.check(),
        };
        let package = match loaded {
            Ok(package) => package,
            Err(LoadError::Refused(refusal)) => {
                let problems = serde_json::to_value(&refusal.problems).unwrap_or_default();
                return Err(UploadFailure::Refused(problems));
            }
            Err(err @ LoadError::Io { .. }) => return Err(internal(&err)),
        };
        let previous = store.current_version(&package.manifest.name).ok();
        match upload::upload(&store, &package, &UploadOptions::default()) {
            Ok(uploaded) => Ok(Stored { uploaded, previous }),
            Err(UploadError::Refused(refusal)) => Err(UploadFailure::Refused(json!([
                {"rule": "discovery", "message": refusal.to_string()}
            ]))),
            // What a crashed compiler printed names files of this machine: it goes to the
            // log, under the id the client is told.
            Err(UploadError::Compile(err @ CompileError::Crashed { .. })) => {
                let id = fault::log(&err);
                Err(UploadFailure::Refused(json!([{
                    "rule": "compile.crash",
                    "message": format!(
                        "the compiler crashed on the module, which is refused (request id {id}; \
                         the server's log has what the compiler said)"
                    ),
                }])))
            }
            Err(UploadError::Compile(err @ CompileError::Busy(_))) => {
                Err(UploadFailure::Busy(err.to_string()))
            }
            Err(err) if err.compile_rule().is_some() => Err(UploadFailure::Refused(json!([
                {"rule": err.compile_rule(), "message": crate::error_chain(&err)}
            ]))),
            Err(err) if err.is_refusal() => Err(UploadFailure::Refused(refused_version(&err))),
            Err(err) => Err(internal(&err)),
        }
    });
    let mut uploaded = match work.await {
        Ok(Ok(Stored { uploaded, previous })) => match &held {
            Some((follower, exclusive)) => {
                let files: Vec<String> =
                    uploaded.artifacts.iter().map(|a| a.file.clone()).collect();
                match follower
                    .publish(exclusive, &uploaded.name, previous, uploaded.put, &files)
                    .await
                {
                    Ok(put) => upload::Uploaded { put, ..uploaded },
                    Err(RemoteError::Store(
                        err
                        @ (StoreError::VersionChanged { .. } | StoreError::OriginChanged { .. }),
                    )) => return UploadFailure::Refused(refused_version(&err)).response(),
                    Err(err) => {
                        let id = fault::log(&err);
                        return response::busy(
                            "application/json",
                            json!({"error": format!(
                                "the version was not published to the bucket, and is not \
                                 served; try again shortly (request id {id}; the server's log \
                                 has the cause)"
                            )})
                            .to_string(),
                        );
                    }
                }
            }
            None => uploaded,
        },
        Ok(Err(failure)) => return failure.response(),
        Err(err) => return response::internal(&err),
    };
    drop(held);
    let status = match uploaded.put {
        PutResult::Stored => StatusCode::CREATED,
        PutResult::Unchanged => StatusCode::OK,
    };
    let mut summary = uploaded.to_json();
    summary["tools"] = json!(std::mem::take(&mut uploaded.tools));
    response::json(status, &summary)
}

/// What an upload brings: an archive received, or a package pulled from a registry.
enum Source {
    Archive(tempfile::NamedTempFile),
    Pulled(Box<crate::registry::Fetched>),
}

/// Whether the upload's body is JSON (a reference) rather than an archive.
fn is_json(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|value| value.trim().eq_ignore_ascii_case("application/json"))
}

/// The archive of an upload, streamed to a file in `staging`.
async fn receive(
    server: &Arc<Server>,
    request: Request<Incoming>,
    staging: &std::path::Path,
) -> Result<tempfile::NamedTempFile, Response<Body>> {
    let archive = tempfile::Builder::new()
        .prefix("upload-")
        .suffix(".tar.gz")
        .tempfile_in(staging)
        .map_err(|err| response::internal(&err))?;
    let file = archive.reopen().map_err(|err| response::internal(&err))?;
    let mut file = tokio::fs::File::from_std(file);
    body::stream_to_file(
        request,
        server.config.max_upload_bytes,
        server.config.body_timeout,
        &mut file,
    )
    .await?;
    Ok(archive)
}

/// The largest reference body read.
const MAX_REFERENCE_BODY: usize = 64 * 1024;

/// The package a JSON upload names, pulled into `staging` (not yet checked), within the
/// server's registry options and its upload bound.
async fn fetch(
    server: &Arc<Server>,
    request: Request<Incoming>,
    staging: &std::path::Path,
) -> Result<crate::registry::Fetched, Response<Body>> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Named {
        reference: String,
        name: Option<String>,
        version: Option<String>,
    }
    let bytes = body::read_whole(request, MAX_REFERENCE_BODY, server.config.body_timeout).await?;
    let named: Named = serde_json::from_slice(&bytes).map_err(|err| {
        problem(
            StatusCode::BAD_REQUEST,
            &format!(
                "a JSON upload is {{\"reference\": \"oci://REGISTRY/REPOSITORY:TAG\"}}, with \
                 \"name\" and \"version\" for a module-only artifact: {err}"
            ),
        )
    })?;
    let reference = crate::registry::Reference::parse(&named.reference).map_err(|reason| {
        UploadFailure::Refused(json!([{"rule": "oci.reference", "message": reason}])).response()
    })?;
    let mut options = server.config.registry.clone();
    options.limits.max_pull_bytes = options
        .limits
        .max_pull_bytes
        .min(server.config.max_upload_bytes as u64);
    options.names = crate::registry::Names {
        name: named.name,
        version: named.version,
    };
    let registry = options.registry().map_err(|err| response::internal(&err))?;
    crate::registry::fetch(&registry, &reference, &options, staging)
        .await
        .map_err(|err| match err {
            LoadError::Refused(refusal) => {
                UploadFailure::Refused(serde_json::to_value(&refusal.problems).unwrap_or_default())
                    .response()
            }
            other => problem(StatusCode::BAD_GATEWAY, &crate::error_chain(&other)),
        })
}

/// An upload stored in the store, and what the package offered before it.
struct Stored {
    uploaded: upload::Uploaded,
    previous: Option<String>,
}

/// The problems of a version the store refuses (one stored already with another module).
fn refused_version(err: &dyn std::fmt::Display) -> Value {
    json!([{"rule": "store.version", "message": err.to_string()}])
}

/// `POST /v1/packages/{name}/call`.
pub async fn call(
    server: &Arc<Server>,
    origin: Origin,
    name: &str,
    request: Request<Incoming>,
) -> Response<Body> {
    let served = match server.calls.package(name) {
        Ok(served) => served,
        Err(err) => return response::not_served(&err),
    };
    let body = match body::read_whole(
        request,
        server.config.max_body_bytes,
        server.config.body_timeout,
    )
    .await
    {
        Ok(body) => body,
        Err(response) => return response,
    };
    if nesting_exceeds(&body, MAX_NESTING) {
        let message = format!("the body nests deeper than {MAX_NESTING} arrays and objects");
        return problem(StatusCode::BAD_REQUEST, &message);
    }
    let mut request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(err) => {
            return problem(
                StatusCode::BAD_REQUEST,
                &format!("the body is not JSON: {err}"),
            )
        }
    };
    // Taken out of the request, as the arguments are below: neither is copied.
    let Some(Value::String(tool)) = request.get_mut("tool").map(Value::take) else {
        return problem(StatusCode::BAD_REQUEST, "the body needs a string \"tool\"");
    };
    // The request's one part of any size.
    let arguments = match request.get_mut("arguments").map(Value::take) {
        None | Some(Value::Null) => json!({}),
        Some(arguments @ Value::Object(_)) => arguments,
        Some(_) => return problem(StatusCode::BAD_REQUEST, "\"arguments\" must be an object"),
    };
    let limits = match server.calls.caps.from_json(request.get("limits")) {
        Ok(limits) => limits,
        Err(message) => return problem(StatusCode::BAD_REQUEST, &message),
    };
    match server
        .calls
        .call(served, tool, arguments, limits, origin)
        .await
    {
        Ok(outcome) => response::json(StatusCode::OK, &outcome),
        Err(err @ CallError::UnknownTool { .. }) => {
            problem(StatusCode::NOT_FOUND, &err.to_string())
        }
        Err(err @ (CallError::Busy | CallError::PackageBusy { .. } | CallError::Closing)) => {
            response::busy(
                "application/json",
                json!({"error": err.to_string()}).to_string(),
            )
        }
        Err(err) => response::internal(&err),
    }
}
