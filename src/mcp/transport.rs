//! Line framing in front of rmcp's stdio transport, so that broken input gets an answer.
//!
//! rmcp answers a well-formed JSON message of the wrong shape with `-32600`, but drops a line
//! that is not JSON at all, and drops an over-long line, with only a log line: the client
//! waits for nothing. This layer reads the lines itself and answers those two cases with
//! JSON-RPC errors (`-32700 Parse error`, `-32600` for a message over the size limit); every
//! other line goes to rmcp unchanged. All output goes through one lock, so lines never
//! interleave.

use std::sync::Arc;

use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::Mutex;

/// The largest message accepted, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
const PIPE_BYTES: usize = 256 * 1024;

/// Puts the framing layer between `input`/`output` (stdin/stdout) and rmcp: returns the
/// stream rmcp serves on. The tasks end when `input` closes or rmcp closes its side.
pub fn framed<R, W>(input: R, output: W) -> DuplexStream
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
    let (from_rmcp, mut to_rmcp) = tokio::io::split(ours);
    // Everything written to `output` goes through this lock, one whole line at a time.
    let output = Arc::new(Mutex::new(output));

    // rmcp's output, line by line, written as it comes (no hop through another task: an
    // answer's latency is the agent's).
    let out = output.clone();
    tokio::spawn(async move {
        let mut from_rmcp = BufReader::new(from_rmcp);
        let mut line = Vec::new();
        loop {
            line.clear();
            match from_rmcp.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if write_line(&out, &line).await.is_err() {
                        break;
                    }
                }
            }
        }
    });

    // The client's input: JSON lines go to rmcp, the rest is answered here.
    tokio::spawn(async move {
        let mut input = BufReader::new(input);
        loop {
            match read_line(&mut input, MAX_MESSAGE_BYTES).await {
                Line::Eof => break,
                Line::Message(line) => {
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    if serde_json::from_slice::<serde::de::IgnoredAny>(&line).is_ok() {
                        if to_rmcp.write_all(&line).await.is_err() {
                            break;
                        }
                        if !line.ends_with(b"\n") && to_rmcp.write_all(b"\n").await.is_err() {
                            break;
                        }
                    } else {
                        let detail = serde_json::from_slice::<serde::de::IgnoredAny>(&line)
                            .err()
                            .map(|e| e.to_string())
                            .unwrap_or_default();
                        tracing::warn!("unparsable input line ({detail}); answered -32700");
                        let answer = error_line(-32700, &format!("Parse error: {detail}"));
                        let _ = write_line(&output, &answer).await;
                    }
                }
                Line::TooLong => {
                    tracing::warn!("input message over {MAX_MESSAGE_BYTES} bytes; answered -32600");
                    let message =
                        format!("Invalid request: message larger than {MAX_MESSAGE_BYTES} bytes");
                    let _ = write_line(&output, &error_line(-32600, &message)).await;
                }
            }
        }
        let _ = to_rmcp.shutdown().await;
    });

    theirs
}

async fn write_line<W: AsyncWrite + Unpin>(output: &Mutex<W>, line: &[u8]) -> std::io::Result<()> {
    let mut output = output.lock().await;
    output.write_all(line).await?;
    output.flush().await
}

/// One line of input.
pub(crate) enum Line {
    Message(Vec<u8>),
    TooLong,
    Eof,
}

/// Reads one line of at most `max` bytes; the rest of a longer one is skipped.
pub(crate) async fn read_line<R: AsyncRead + Unpin>(input: &mut BufReader<R>, max: usize) -> Line {
    let mut line = Vec::new();
    let limit = max as u64 + 1;
    match (&mut *input).take(limit).read_until(b'\n', &mut line).await {
        Err(_) => return Line::Eof,
        Ok(0) => return Line::Eof,
        Ok(_) => {}
    }
    if line.len() <= max || line.ends_with(b"\n") {
        return Line::Message(line);
    }
    // Skip to the end of the over-long line.
    loop {
        let buf = match input.fill_buf().await {
            Ok(b) if !b.is_empty() => b,
            _ => return Line::TooLong,
        };
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                input.consume(i + 1);
                return Line::TooLong;
            }
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    }
}

pub(crate) fn error_line(code: i64, message: &str) -> Vec<u8> {
    let mut line = serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code, "message": message},
    }))
    .expect("a JSON value serialises");
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn garbage_is_answered_and_json_passes_through() {
        let (client, server_io) = tokio::io::duplex(1 << 16);
        let (server_in, server_out) = tokio::io::split(server_io);
        let mut rmcp_side = framed(server_in, server_out);
        let (mut client_r, mut client_w) = tokio::io::split(client);
        client_w
            .write_all(b"not json\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
            .await
            .unwrap();

        let mut forwarded = vec![0u8; 64];
        let n = rmcp_side.read(&mut forwarded).await.unwrap();
        assert_eq!(
            &forwarded[..n],
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n"
        );

        let mut reply = BufReader::new(&mut client_r);
        let mut line = String::new();
        reply.read_line(&mut line).await.unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["error"]["code"], -32700);
        assert_eq!(v["id"], serde_json::Value::Null);
    }
}
