//! Stalled writes end the connection. hyper bounds the time to send a request's headers
//! (`--idle-timeout-ms`) and [`super::body`] the time to send its body, but nothing in hyper
//! bounds how long an answer may wait for a client that does not read it: such a connection
//! would hold its descriptor, its permit among `--max-connections`, the answer's bytes and, for
//! an SSE stream, a session, for as long as the client likes. Here every write, flush and
//! shutdown of a connection fails with `TimedOut` once it has gone `--write-timeout-ms`
//! without the socket taking a byte; hyper then drops the connection, and with it the response
//! or the stream. A slow reader is not cut off: the time counts from the last byte taken, not
//! from the start of the answer.
//!
//! What this file does not do: bound reads (hyper's header timer and the body deadline do).

use std::pin::Pin;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_io_timeout::TimeoutStream;

/// A connection as hyper serves it.
pub type Connection = Pin<Box<TimeoutStream<TcpStream>>>;

/// `stream`, whose writes fail once one has waited `timeout` for the client to take a byte.
pub fn stalled_writes_end(stream: TcpStream, timeout: Duration) -> Connection {
    let mut stream = TimeoutStream::new(stream);
    stream.set_write_timeout(Some(timeout));
    Box::pin(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_write_the_peer_never_reads_fails_as_timed_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let mut connection = stalled_writes_end(accepted, Duration::from_millis(200));
        // Far more than both sockets' buffers hold: the writes stall once they are full.
        let chunk = vec![b'x'; 1024 * 1024];
        let mut written = 0usize;
        let failed = loop {
            match connection.write(&chunk).await {
                Ok(n) => written += n,
                Err(err) => break err,
            }
            assert!(
                written < 1024 * 1024 * 1024,
                "1 GiB went to a peer that reads nothing"
            );
        };
        assert_eq!(failed.kind(), std::io::ErrorKind::TimedOut, "{failed}");
        drop(peer);
    }

    #[tokio::test]
    async fn a_slow_reader_is_not_cut_off() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut peer = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let mut connection = stalled_writes_end(accepted, Duration::from_millis(300));
        // 32 MiB, read in 64 KiB pieces with a pause now and then shorter than the timeout:
        // the whole takes longer than the timeout, and never fails.
        let total = 32 * 1024 * 1024;
        let reader = tokio::spawn(async move {
            let mut buffer = vec![0u8; 64 * 1024];
            let mut read = 0usize;
            let mut pieces = 0u32;
            while read < total {
                read += peer.read(&mut buffer).await.unwrap();
                pieces += 1;
                if pieces.is_multiple_of(64) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            read
        });
        connection.write_all(&vec![b'x'; total]).await.unwrap();
        connection.flush().await.unwrap();
        assert_eq!(reader.await.unwrap(), total);
    }
}
