//! An agent with a deadline calling an IP-literal host creates no thread per call (its own
//! test binary, so that no other test's threads come and go while it counts).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use kvfabric_http_client::agent;
use ureq::Agent;

/// Threads of this process now (Linux).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn an_agent_with_a_deadline_calls_an_ip_literal_without_a_thread_per_call() {
    const CALLS: usize = 200;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/ping", listener.local_addr().unwrap());
    // One keep-alive connection answered by one thread.
    let server = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        let mut out = conn;
        for _ in 0..CALLS {
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
                line.clear();
            }
            out.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .unwrap();
        }
        let _ = reader.read(&mut [0; 1]);
    });
    let agent = agent(
        Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .build(),
    );
    let before = threads();
    let mut most = before;
    for _ in 0..CALLS {
        let body = agent
            .get(&url)
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        assert_eq!(body, "ok");
        most = most.max(threads());
    }
    drop(agent);
    server.join().unwrap();
    // ureq's own resolver would have started a thread per call; some would still be exiting
    // as the next call is made.
    assert_eq!(most, before, "threads grew during the calls");
}
