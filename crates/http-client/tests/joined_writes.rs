//! An agent's requests reach a real server on loopback whole and in order, a small one in one
//! TCP segment (the server's `tcpi_data_segs_in` counts one per request), a large body as it
//! was written, over one pooled keep-alive connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use kvfabric_http_client::agent;
use ureq::Agent;

/// Data-carrying segments `conn` has received (Linux `TCP_INFO`).
fn data_segments_in(conn: &TcpStream) -> u32 {
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a writable tcp_info and `len` its size; the fd is open.
    let rc = unsafe {
        libc::getsockopt(
            conn.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(
        rc,
        0,
        "getsockopt(TCP_INFO): {}",
        std::io::Error::last_os_error()
    );
    info.tcpi_data_segs_in
}

/// Reads one request from `reader`: its body (by `content-length`).
fn read_request(reader: &mut BufReader<TcpStream>) -> Vec<u8> {
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "connection closed"
        );
        if line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    body
}

fn body(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| b'a' + ((i as u8) ^ seed) % 26).collect()
}

#[test]
fn small_requests_leave_in_one_segment_and_large_ones_arrive_whole() {
    const SMALL: usize = 50;
    let large = body(1 << 20, 7);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/x", listener.local_addr().unwrap());
    let want_large = large.clone();
    let server = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        let mut out = conn.try_clone().unwrap();
        for i in 0..SMALL {
            assert_eq!(read_request(&mut reader), body(160, i as u8), "request {i}");
            out.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .unwrap();
        }
        let small_segments = data_segments_in(&conn);
        assert_eq!(read_request(&mut reader), want_large, "the large body");
        out.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .unwrap();
        small_segments
    });
    let agent = agent(
        Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .build(),
    );
    let post = |b: &[u8]| {
        let text = agent
            .post(&url)
            .header("content-type", "application/json")
            .send(b)
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        assert_eq!(text, "ok");
    };
    for i in 0..SMALL {
        post(&body(160, i as u8));
    }
    post(&large);
    let small_segments = server.join().unwrap();
    assert_eq!(
        small_segments, SMALL as u32,
        "each small request's head and body in one segment"
    );
}
