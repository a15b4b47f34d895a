//! Response bodies as the guest receives them: read into the answer (at most 256 KiB of
//! UTF-8, else `too_large` / `not_text`) or written to a `file` output, each chunk charged to
//! the call's write budget first (`write_budget` when it runs out). It does not open the
//! output file (`volume` does) nor decide when a response is final (`exchange` does).

use std::fmt::Display;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Body;
use tokio::io::AsyncWriteExt;

use crate::http::answer::{ErrorKind, HttpError};
use crate::sandbox::WriteBudget;

/// The largest inline body, in bytes.
pub const MAX_INLINE_BYTES: usize = 256 * 1024;

/// The most a redirect's own body is read before the connection is given up instead.
const MAX_DRAINED_BYTES: usize = 64 * 1024;

/// The next data chunk of `body`, skipping trailers; `None` at its end.
async fn next_chunk<B>(body: &mut B, authority: &str) -> Result<Option<Bytes>, HttpError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Display,
{
    loop {
        match body.frame().await {
            None => return Ok(None),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
            Some(Err(error)) => {
                return Err(HttpError::new(
                    ErrorKind::Connection,
                    format!("reading the response from {authority} failed: {error}"),
                ))
            }
        }
    }
}

/// The body as inline text.
pub async fn inline<B>(mut body: B, authority: &str) -> Result<String, HttpError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Display,
{
    let mut bytes = Vec::new();
    while let Some(chunk) = next_chunk(&mut body, authority).await? {
        if bytes.len() + chunk.len() > MAX_INLINE_BYTES {
            return Err(HttpError::new(
                ErrorKind::TooLarge,
                format!(
                    "the response body from {authority} is larger than {MAX_INLINE_BYTES} bytes \
                     (256 KiB), the most an inline body may be; save it to a file with \
                     output {{\"type\":\"file\",\"path\":\"/volume/tmp/…\"}}"
                ),
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    String::from_utf8(bytes).map_err(|error| {
        HttpError::new(
            ErrorKind::NotText,
            format!(
                "the response body from {authority} is not UTF-8 text (invalid byte at offset {}); \
                 save it to a file with output {{\"type\":\"file\",\"path\":\"/volume/tmp/…\"}}",
                error.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Writes the body to `file`, charging `budget` before each chunk. Returns the bytes written.
pub async fn to_file<B>(
    mut body: B,
    file: std::fs::File,
    budget: &WriteBudget,
    authority: &str,
    guest_path: &str,
) -> Result<u64, HttpError>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Display,
{
    let mut file = tokio::fs::File::from_std(file);
    let mut written = 0u64;
    let failed = |error: std::io::Error| {
        HttpError::new(
            ErrorKind::BadPath,
            format!("writing output.path `{guest_path}` failed: {error}"),
        )
    };
    while let Some(chunk) = next_chunk(&mut body, authority).await? {
        let len = chunk.len() as u64;
        if !budget.try_charge(len) {
            return Err(HttpError::new(
                ErrorKind::WriteBudget,
                format!(
                    "saving the response from {authority} to `{guest_path}` would pass the \
                     call's write budget after {written} bytes ({} bytes left)",
                    budget.remaining()
                ),
            ));
        }
        file.write_all(&chunk).await.map_err(failed)?;
        written += len;
    }
    file.flush().await.map_err(failed)?;
    Ok(written)
}

/// Reads and forgets a redirect's body so its connection can serve the next hop; a large
/// or broken body is simply dropped, closing that connection.
pub async fn drain<B: Body<Data = Bytes> + Unpin>(mut body: B) {
    let mut seen = 0usize;
    while let Some(Ok(frame)) = body.frame().await {
        if let Ok(data) = frame.into_data() {
            seen += data.len();
            if seen > MAX_DRAINED_BYTES {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    fn body(bytes: Vec<u8>) -> Full<Bytes> {
        Full::new(Bytes::from(bytes))
    }

    #[test]
    fn an_inline_body_of_exactly_256_kib_is_kept() {
        let text = block_on(inline(body(vec![b'a'; MAX_INLINE_BYTES]), "a.test")).unwrap();
        assert_eq!(text.len(), MAX_INLINE_BYTES);
    }

    #[test]
    fn one_byte_more_is_too_large() {
        let error = block_on(inline(body(vec![b'a'; MAX_INLINE_BYTES + 1]), "a.test"));
        assert_eq!(error.unwrap_err().kind, ErrorKind::TooLarge);
    }

    #[test]
    fn invalid_utf8_is_not_text_naming_the_offset() {
        let error = block_on(inline(body(b"ok\xff".to_vec()), "a.test")).unwrap_err();
        assert_eq!(error.kind, ErrorKind::NotText);
        assert!(error.message.contains("offset 2"), "{}", error.message);
    }

    #[test]
    fn a_file_output_is_charged_to_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let budget = WriteBudget::new(10);
        let file = std::fs::File::create(dir.path().join("out")).unwrap();
        let written = block_on(to_file(
            body(vec![1; 6]),
            file,
            &budget,
            "a.test",
            "/volume/tmp/out",
        ));
        assert_eq!(written.unwrap(), 6);
        assert_eq!(budget.remaining(), 4);
        assert_eq!(std::fs::read(dir.path().join("out")).unwrap(), vec![1; 6]);
        let file = std::fs::File::create(dir.path().join("more")).unwrap();
        let error = block_on(to_file(
            body(vec![1; 6]),
            file,
            &budget,
            "a.test",
            "/volume/tmp/more",
        ));
        assert_eq!(error.unwrap_err().kind, ErrorKind::WriteBudget);
        assert_eq!(budget.remaining(), 4);
    }
}
