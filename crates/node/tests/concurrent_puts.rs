//! Puts and gets from several clients at once on one real node whose host tier is smaller than
//! the puts in flight: every put lands (demoted to disk or waiting for room, never refused with
//! 507 while the disk tier has room) and every block reads back byte for byte.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{eventually, payload, tiny, Options, TestNode, TOKEN_A};

/// Bytes of one stored tiny block (header and payload).
fn block_bytes() -> u64 {
    tiny().block_layout().payload_len + kvfabric_store::HEADER_LEN as u64
}

fn small_host_node() -> TestNode {
    common::kvfabric().node(Options {
        // Two blocks of host RAM; the disk holds many.
        host_bytes: 2 * block_bytes(),
        disk_bytes: Some(64 << 20),
        ..Options::default()
    })
}

/// Opens a put of `body` and sends its headers and half its body, then stops.
fn half_put(node: &TestNode, body: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(node.url.trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(common::CALL_TIMEOUT)).unwrap();
    write!(
        s,
        "PUT /v1/blocks HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN_A}\r\n\
         kvfabric-model: tiny-mla\r\nkvfabric-tokens: 64\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(&body[..body.len() / 2]).unwrap();
    s.flush().unwrap();
    s
}

/// Sends the rest of a half put and returns the response's status line.
fn finish_put(mut s: TcpStream, body: &[u8]) -> String {
    s.write_all(&body[body.len() / 2..]).unwrap();
    s.flush().unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines().next().unwrap_or_default().to_string()
}

#[test]
fn a_put_waits_for_host_room_held_by_puts_in_flight_instead_of_507() {
    let node = small_host_node();
    let g = tiny();
    let (pa, pb, pc) = (payload(&g, 501), payload(&g, 502), payload(&g, 503));
    // Two puts in flight hold the whole host tier in reservations.
    let a = half_put(&node, &pa);
    let b = half_put(&node, &pb);
    eventually("both reservations are held", || {
        node.metric("kvfabric_tier_used_bytes{node=\"n1\",tier=\"host\"}")
            == (2 * block_bytes()) as f64
    });
    // A third put finds no host room and nothing to demote yet: it waits.
    let third = std::thread::scope(|s| {
        let third = s.spawn(|| node.put(Some(TOKEN_A), &g, &pc, &[]));
        eventually("the third put is in flight", || {
            node.metric("kvfabric_inflight_requests{node=\"n1\"}") == 3.0
        });
        // Still waiting (a refusal would have ended it with 507).
        std::thread::sleep(Duration::from_millis(100));
        assert!(!third.is_finished(), "the third put waits for room");
        assert!(finish_put(a, &pa).contains("201"));
        assert!(finish_put(b, &pb).contains("201"));
        third.join().unwrap()
    });
    assert_eq!(third.status, 201, "{}", third.text());
    let got = node.get(Some(TOKEN_A), &format!("/v1/blocks/{}", third.block()), &[]);
    assert_eq!((got.status, got.body), (200, pc));
    assert!(node.metric("kvfabric_demotions_total{node=\"n1\"}") >= 1.0);
}

#[test]
fn concurrent_clients_put_into_a_small_host_tier_and_read_every_block_back() {
    let node = small_host_node();
    let g = tiny();
    let (clients, puts) = (4u64, 8u64);
    let ids: Vec<(String, Vec<u8>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..clients)
            .map(|c| {
                let (node, g) = (&node, &g);
                s.spawn(move || {
                    (0..puts)
                        .map(|i| {
                            let p = payload(g, 600 + c * puts + i);
                            let r = node.put(Some(TOKEN_A), g, &p, &[]);
                            assert_eq!(r.status, 201, "client {c} put {i}: {}", r.text());
                            // Read something back while others put.
                            let got =
                                node.get(Some(TOKEN_A), &format!("/v1/blocks/{}", r.block()), &[]);
                            assert_eq!((got.status, &got.body), (200, &p));
                            (r.block(), p)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    assert_eq!(ids.len() as u64, clients * puts);
    for (id, p) in &ids {
        let got = node.get(Some(TOKEN_A), &format!("/v1/blocks/{id}"), &[]);
        assert_eq!((got.status, &got.body), (200, p), "block {id}");
    }
    assert!(node.metric("kvfabric_demotions_total{node=\"n1\"}") >= (clients * puts - 2) as f64);
    node.assert_serving(610);
}
