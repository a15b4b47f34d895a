//! What a `hako serve` reveals, and to whom, against a real server: a page that rebinds its own
//! name to 127.0.0.1 is refused on every route (curl, resolving the name to loopback as the
//! rebound browser would, and sending it in `Host`), `Host` forms HTTP/1.1 forbids are 400, no
//! answer carries a host's path or error text, and an answer its client never reads closes its
//! connection instead of holding it (raw sockets with a small receive buffer).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::serve_support::{self, Server};

/// `curl ARGS… URL`: the status and the body. curl exits non-zero when `--max-time` ends a
/// stream, which is how an SSE answer is read here; the status is printed all the same.
fn curl(args: &[&str], url: &str) -> (u16, String) {
    let output = Command::new("curl")
        .args(["-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", "5"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl runs (Debian package curl)");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", &text));
    let status = status
        .parse()
        .unwrap_or_else(|_| panic!("curl printed no status: {text:?}"));
    (status, body.to_string())
}

/// The routes of the server, each as curl's method and body arguments and a path.
fn routes() -> Vec<(Vec<&'static str>, &'static str)> {
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let call = r#"{"tool":"greet","arguments":{"name":"Ada"}}"#;
    let post = |body: &'static str| {
        vec![
            "-X",
            "POST",
            "-H",
            "content-type: application/json",
            "--data",
            body,
        ]
    };
    vec![
        (vec![], "/healthz"),
        (vec!["-I"], "/healthz"),
        (vec![], "/readyz"),
        (vec![], "/metrics"),
        (vec![], "/v1/packages"),
        (vec![], "/v1/packages/greet"),
        (post(call), "/v1/packages/greet/call"),
        (post("{}"), "/v1/packages"),
        (post(ping), "/mcp/greet"),
        (vec![], "/mcp/greet"),
        // A stream that stays open: curl stops reading it after a second.
        (vec!["--max-time", "1"], "/sse/greet"),
        (post(ping), "/message/greet"),
        (
            post(ping),
            "/message?sessionId=00000000-0000-4000-8000-000000000000",
        ),
        (vec![], "/no/such/route"),
    ]
}

#[test]
fn a_rebound_name_is_refused_on_every_route_and_the_servers_own_names_are_not() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--allow-host", "hako.internal"]);
    let port = server.addr.port();
    let rebound = format!("rebound.example:{port}:127.0.0.1");
    let internal = format!("hako.internal:{port}:127.0.0.1");
    for (args, path) in routes() {
        // The browser of a page whose name now points at loopback.
        let mut forged = args.clone();
        forged.extend(["--resolve", &rebound]);
        let (status, body) = curl(&forged, &format!("http://rebound.example:{port}{path}"));
        assert_eq!(status, 421, "{args:?} {path}: {body}");
        if !args.contains(&"-I") {
            assert!(body.contains("--allow-host"), "{path}: {body}");
        }
        // The server's own names, and the one the operator added, reach the route.
        for url in [
            format!("http://127.0.0.1:{port}{path}"),
            format!("http://localhost:{port}{path}"),
            format!("http://hako.internal:{port}{path}"),
        ] {
            let mut own = args.clone();
            own.extend(["--resolve", &internal]);
            let (status, body) = curl(&own, &url);
            assert_ne!(status, 421, "{args:?} {url}: {body}");
            assert_ne!(status, 0, "{args:?} {url}: no answer");
        }
    }
    // A port forward may renumber the port: the name is what counts.
    let (status, _) = curl(
        &["-H", "Host: localhost:1"],
        &format!("http://127.0.0.1:{port}/v1/packages"),
    );
    assert_eq!(status, 200);
}

#[test]
fn host_forms_http_1_1_forbids_are_400_and_an_absolute_target_must_name_the_server_too() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    let exchange = |head: &str| -> u16 {
        let mut stream = TcpStream::connect(server.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        serve_support::read_head(&mut BufReader::new(stream)).0
    };
    let close = "connection: close\r\n\r\n";
    assert_eq!(
        exchange(&format!("GET /v1/packages HTTP/1.1\r\n{close}")),
        400
    );
    assert_eq!(
        exchange(&format!(
            "GET /v1/packages HTTP/1.1\r\nhost: localhost\r\nhost: rebound.example\r\n{close}"
        )),
        400
    );
    assert_eq!(
        exchange(&format!(
            "GET http://rebound.example/v1/packages HTTP/1.1\r\nhost: localhost\r\n{close}"
        )),
        421
    );
    assert_eq!(
        exchange(&format!(
            "GET http://localhost/v1/packages HTTP/1.1\r\nhost: localhost\r\n{close}"
        )),
        200
    );
    // HTTP/1.0 had no Host; no browser sends it without one.
    assert_eq!(exchange("GET /healthz HTTP/1.0\r\n\r\n"), 200);
    // Curl's own Host removed.
    let (status, body) = curl(
        &["-H", "Host:"],
        &format!("http://127.0.0.1:{}/healthz", server.addr.port()),
    );
    assert_eq!(status, 400, "{body}");
}

#[test]
fn a_bad_allow_host_stops_the_server_before_it_listens() {
    let store = serve_support::store();
    let output = serve_support::hako()
        .args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(store.path())
        .args(["--allow-host", "http://hako.example:80"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a host name or address"), "{stderr}");
}

#[test]
fn no_answer_names_the_store_when_it_cannot_be_read() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &[]);
    // The version's record gone: the package cannot be read, and the store's error names the
    // record's file.
    let versions = store.path().join("packages/greet/versions");
    for entry in std::fs::read_dir(&versions).unwrap() {
        let record = entry.unwrap().path().join("upload.json");
        if record.exists() {
            std::fs::remove_file(record).unwrap();
        }
    }
    let store_path = store.path().display().to_string();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let mut answers = vec![
        ("GET /v1/packages/greet", server.get("/v1/packages/greet")),
        ("POST /mcp/greet", server.post_json("/mcp/greet", &ping)),
        (
            "POST /message/greet",
            server.post_json("/message/greet", &ping),
        ),
        ("GET /sse/greet", server.get("/sse/greet")),
    ];
    answers.push((
        "POST /v1/packages/greet/call",
        server.post_json(
            "/v1/packages/greet/call",
            &json!({"tool": "greet", "arguments": {"name": "x"}}),
        ),
    ));
    for (route, reply) in answers {
        let text = reply.text();
        assert!(
            reply.status == 500 || text.contains("-32603"),
            "{route}: {} {text}",
            reply.status
        );
        assert!(text.contains("request id "), "{route}: {text}");
        assert!(
            !text.contains(&store_path) && !text.contains("upload.json"),
            "{route}: {text}"
        );
    }
    // The packages that can be read are still served.
    let reply = server.post_json(
        "/v1/packages/fixture/call",
        &json!({"tool": "echo", "arguments": {}}),
    );
    assert_eq!(reply.status, 200, "{}", reply.text());
}

/// A connection to `addr` whose receive buffer is as small as the kernel allows, so that an
/// answer it does not read stalls the server's writes after a few MiB instead of many.
fn small_window(addr: SocketAddr) -> TcpStream {
    use rustix::net::{sockopt, AddressFamily, SocketType};
    let socket = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    sockopt::set_socket_recv_buffer_size(&socket, 4096).unwrap();
    rustix::net::connect(&socket, &addr).unwrap();
    let stream = TcpStream::from(socket);
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
}

/// What is left to read on `stream`, until the server ends it (end of file or a reset).
fn drain(stream: &mut TcpStream) -> usize {
    let mut buffer = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return total,
            Ok(read) => total += read,
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => return total,
            Err(err) => panic!("reading what the server sent: {err}"),
        }
    }
}

#[test]
fn an_answer_its_client_never_reads_closes_its_connection() {
    let store = serve_support::store();
    let server = Server::start(
        store.path(),
        &["--write-timeout-ms", "300", "--max-connections", "1"],
    );
    let one = server.get("/v1/packages/fixture");
    assert_eq!(one.status, 200);
    // Pipelined requests, whose answers together are far more than the two sockets' buffers
    // hold, sent from a thread of their own (the server reads them only as it answers).
    let requests = (48 << 20) / one.body.len().max(1);
    let answers_bytes = requests * one.body.len();
    let mut unread = small_window(server.addr);
    let mut sender = unread.try_clone().unwrap();
    std::thread::spawn(move || {
        let request = b"GET /v1/packages/fixture HTTP/1.1\r\nhost: localhost\r\n\r\n";
        for _ in 0..requests {
            if sender.write_all(request).is_err() {
                return; // the server closed the connection
            }
        }
    });
    // The one place among --max-connections is the unread answers': the next client waits in
    // the kernel's backlog until the server gives that connection up, then is answered.
    let mut next = TcpStream::connect(server.addr).unwrap();
    next.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    serve_support::write_request(&mut next, "GET", "/healthz", &[], b"");
    let (status, _) = serve_support::read_head(&mut BufReader::new(next));
    assert_eq!(status, 200, "the next client was answered");
    // The unread answers were cut off where the writes stalled.
    let read = drain(&mut unread);
    assert!(
        read < answers_bytes / 2,
        "{read} of {answers_bytes} bytes of answers arrived"
    );
}

#[test]
fn a_stream_its_client_never_reads_ends_its_session() {
    let store = serve_support::store();
    let server = Server::start(store.path(), &["--write-timeout-ms", "300"]);
    let mut stream = small_window(server.addr);
    stream
        .write_all(
            b"GET /sse/fixture HTTP/1.1\r\nhost: localhost\r\naccept: text/event-stream\r\n\r\n",
        )
        .unwrap();
    let mut reader = BufReader::new(stream);
    let (status, _) = serve_support::read_head(&mut reader);
    assert_eq!(status, 200);
    // The endpoint event (in a chunk of its own), and then nothing more is read.
    let mut endpoint = None;
    while endpoint.is_none() {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        endpoint = line
            .trim()
            .strip_prefix("data: ")
            .map(|data| data.to_string());
    }
    let endpoint = endpoint.unwrap();
    // Answers of 800 KiB each (a guest's stdout line may hold 1 MiB), 32 of them: far more
    // than the sockets hold.
    let call = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "echo", "arguments": {"text": "x".repeat(800 * 1024)}}})
    };
    for id in 1..=32 {
        let reply = server.post_json(&endpoint, &call(id));
        if reply.status == 404 {
            break; // already gone
        }
        assert_eq!(reply.status, 202, "{}", reply.text());
    }
    // The answers stall the stream; its write timeout closes the connection and so ends the
    // session, which a client then finds gone.
    // (A POST to a session whose outbox is full waits for room, so each is given 10 s.)
    let ping = json!({"jsonrpc": "2.0", "id": "p", "method": "ping"}).to_string();
    let started = Instant::now();
    loop {
        let mut post = TcpStream::connect(server.addr).unwrap();
        post.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        serve_support::write_request(&mut post, "POST", &endpoint, &[], ping.as_bytes());
        let mut answer = BufReader::new(post);
        let mut status_line = String::new();
        let status = match answer.read_line(&mut status_line) {
            Ok(_) => status_line.split_whitespace().nth(1).map(str::to_string),
            Err(_) => None,
        };
        if status.as_deref() == Some("404") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the stalled session is still open (the last POST: {status:?})"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // What reached the client is a fraction of the answers.
    let mut rest = reader.into_inner();
    let read = drain(&mut rest);
    assert!(read < 8 * 800 * 1024, "{read} bytes of the stream arrived");
}
