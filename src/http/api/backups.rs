//! `POST /api/v1/manage/backups`: a consistent backup of the running server, streamed as a
//! tar archive (see `backup`) in an `application/octet-stream` download. Only the server's
//! owner may take one: it holds every record and the key-encryption key.

use http::HeaderValue;
use warp::Reply;
use warp::reply::Response;

use super::manage::credential;
use crate::domain::accounts;
use crate::domain::backup;
use crate::domain::error::Error;
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::request::Request;

pub async fn create(app: &App, req: &mut Request) -> Result<Response> {
    let credential = credential(app, req)?;
    let (store, clock) = (app.handles.store.clone(), app.handles.clock.clone());
    // Checked when the download starts and again while it runs: a token revoked (or a
    // session ended, an account suspended) meanwhile stops it.
    let still_allowed = move || {
        let account = credential.account(store.as_ref(), clock.now())?;
        accounts::require_server_owner(&account)
    };
    still_allowed()?;
    let (store, dir, now) = (
        app.handles.store.clone(),
        app.config.data_dir.clone(),
        app.handles.now(),
    );
    // The unnamed file lives in the data dir: the one place the service may always write.
    let (file, manifest) =
        tokio::task::spawn_blocking(move || backup::write_unnamed(store.as_ref(), &dir, now))
            .await
            .map_err(|e| Error::Internal(format!("the backup task failed: {e}")))??;
    log::info!(
        "backup taken through the API (change sequence {})",
        manifest.last_change_seq
    );
    let mut response = warp::reply::stream(backup::chunks(file, still_allowed)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        // A tar archive, sent as a generic file download: client generators map
        // `application/octet-stream` to bytes and the file name tells what it is
        // (`openapi::Operation::ok_file`).
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(
        http::header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"intake-backup.tar\""),
    );
    Ok(response)
}
