//! MCP over stdio (`hako serve --stdio PACKAGE|NAME`): one JSON-RPC message per line in, one
//! answer per line out, for one package.
//!
//! A physical line may hold at most [`MAX_LINE`] bytes (its newline not counted). A longer one
//! gets one parse error (id `null`); the rest of it is discarded through its newline, and the
//! next line is read as usual. Tool calls run on the guest pool while further lines are read,
//! so answers may come out of order (their ids tell them apart). At end of input — or on
//! SIGTERM/SIGINT, which stop reading — every accepted call is finished and answered, and
//! only then does the loop return. Messages go through [`super::mcp::dispatch`].

use std::sync::Arc;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::access::{Door, Origin};
use super::calls::Calls;
use super::mcp::{self, code, Dispatch};

/// The longest physical line, in bytes, without its newline.
pub const MAX_LINE: usize = 64 * 1024;

/// One line read by [`next_line`].
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// A line, without its newline (or `\r\n`).
    Line(Vec<u8>),
    /// A line longer than [`MAX_LINE`], discarded through its newline.
    TooLong,
    /// End of input.
    Eof,
}

/// Reads the next physical line, never holding more than [`MAX_LINE`] bytes of it.
pub async fn next_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> std::io::Result<Read> {
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buffer = reader.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(match (too_long, line.is_empty()) {
                (true, _) => Read::TooLong,
                (false, true) => Read::Eof,
                (false, false) => Read::Line(line),
            });
        }
        let (chunk, done) = match buffer.iter().position(|&b| b == b'\n') {
            Some(end) => (&buffer[..end], Some(end + 1)),
            None => (buffer, None),
        };
        if !too_long {
            if line.len() + chunk.len() > MAX_LINE {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let consumed = done.unwrap_or(buffer.len());
        reader.consume(consumed);
        if done.is_some() {
            if too_long {
                return Ok(Read::TooLong);
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Read::Line(line));
        }
    }
}

/// Serves `package` over `input` and `output` until end of input or `stop` resolves, then
/// finishes every accepted call.
pub async fn serve<R, W>(
    calls: Arc<Calls>,
    package: String,
    mut input: R,
    output: W,
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (lines, mut outgoing) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        let mut output = output;
        while let Some(mut line) = outgoing.recv().await {
            line.push(b'\n');
            output.write_all(&line).await?;
            output.flush().await?;
        }
        Ok::<(), std::io::Error>(())
    });
    let mut calls_running = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let read = tokio::select! {
            read = next_line(&mut input) => read?,
            () = &mut stop => Read::Eof,
        };
        let answer = match read {
            Read::Eof => break,
            Read::TooLong => Some(mcp::error(
                &mcp::Id::null(),
                code::PARSE_ERROR,
                &format!("the line is longer than {MAX_LINE} bytes; it was discarded"),
            )),
            Read::Line(line) if line.iter().all(u8::is_ascii_whitespace) => None,
            Read::Line(line) => match mcp::dispatch(&calls, &package, &line, stdio_origin()) {
                Dispatch::Answer(answer) | Dispatch::Busy(answer) => Some(answer),
                Dispatch::Silent => None,
                Dispatch::Pending(pending) => {
                    let lines = lines.clone();
                    calls_running.spawn(async move {
                        let _ = lines.send(pending.answer().await).await;
                    });
                    None
                }
            },
        };
        if let Some(answer) = answer {
            if lines.send(answer).await.is_err() {
                break; // the writer failed; its error is returned below
            }
        }
    }
    while calls_running.join_next().await.is_some() {}
    drop(lines);
    match writer.await {
        Ok(result) => result,
        Err(err) => Err(std::io::Error::other(err)),
    }
}

/// Where a stdio call comes from: the one local client.
fn stdio_origin() -> Origin {
    Origin {
        door: Door::Stdio,
        caller: "local",
        rpc_id: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    async fn lines_of(input: Vec<u8>, capacity: usize) -> Vec<Read> {
        let mut reader = BufReader::with_capacity(capacity, input.as_slice());
        let mut out = Vec::new();
        loop {
            let read = next_line(&mut reader).await.unwrap();
            let eof = read == Read::Eof;
            out.push(read);
            if eof {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn lines_are_split_at_newlines_and_lose_a_trailing_carriage_return() {
        let read = lines_of(b"one\r\ntwo\nthree".to_vec(), 4).await;
        assert_eq!(
            read,
            [
                Read::Line(b"one".to_vec()),
                Read::Line(b"two".to_vec()),
                Read::Line(b"three".to_vec()),
                Read::Eof
            ]
        );
    }

    #[tokio::test]
    async fn an_oversized_line_is_one_error_and_the_next_line_is_read() {
        let mut input = vec![b'x'; MAX_LINE + 1];
        input.extend_from_slice(b"\nnext\n");
        let read = lines_of(input, 8 * 1024).await;
        assert_eq!(
            read,
            [Read::TooLong, Read::Line(b"next".to_vec()), Read::Eof]
        );
    }

    #[tokio::test]
    async fn a_line_of_exactly_the_limit_is_kept() {
        let mut input = vec![b'y'; MAX_LINE];
        input.push(b'\n');
        let read = lines_of(input, 8 * 1024).await;
        assert_eq!(read[0], Read::Line(vec![b'y'; MAX_LINE]));
    }
}
