//! `kvfabric cluster up` starts three node processes that agree on one leader; `cluster down`
//! stops every one of them.

mod cluster_harness;

use cluster_harness::{alive, init_tracing};

#[test]
fn three_nodes_agree_on_one_leader_and_down_leaves_no_process() {
    init_tracing();
    tracing::info!("phase 1: cluster up with three nodes");
    let mut cluster = cluster_harness::kvfabric().cluster(3);
    let pids: Vec<i32> = (1..=3).map(|i| cluster.pid(i)).collect();
    assert!(pids.iter().all(|p| alive(*p)), "every node process runs");
    // `up` returned once every node was ready; an election on a loaded machine can make one
    // unready (no known leader) for a moment, so each check below is retried.
    cluster.wait_for("every node ready after up", || {
        (1..=3).all(|i| cluster.ready(i)).then_some(())
    });

    tracing::info!("phase 2: every node reports the same leader and term");
    let (leader, term) = cluster.agreed_leader(&[1, 2, 3]);
    assert!(term >= 1);
    cluster.wait_for(
        "every node to list three members, one of them leader (the agreed one), the rest followers",
        || {
            (1..=3)
                .all(|i| {
                    cluster.view(i).is_some_and(|v| {
                        let leaders: Vec<_> =
                            v.roles.iter().filter(|(_, r)| r == "leader").collect();
                        v.roles.len() == 3
                            && leaders.len() == 1
                            && leaders[0].0 == leader
                            && v.roles
                                .iter()
                                .all(|(_, r)| r == "leader" || r == "follower")
                    })
                })
                .then_some(())
        },
    );
    for i in 1..=3 {
        let v = cluster.view(i).expect("view");
        for (member, tiers) in &v.tiers {
            assert_eq!(tiers, &["host", "disk"], "n{i} shows {member}'s tiers");
        }
    }
    cluster.wait_for("every member healthy on every node", || {
        (1..=3)
            .all(|i| {
                cluster
                    .view(i)
                    .is_some_and(|v| v.healthy.iter().all(|(_, h)| *h))
            })
            .then_some(())
    });

    tracing::info!("phase 3: cluster down stops every process");
    let (ok, out) = cluster.down();
    assert!(ok, "cluster down failed: {out}");
    assert!(out.contains("stopped 3 node(s)"), "{out}");
    for p in &pids {
        assert!(!alive(*p), "pid {p} still runs after down");
    }
    assert!((1..=3).all(|i| !cluster.path().join(format!("node{i}.pid")).exists()));

    tracing::info!("phase 4: down again finds nothing to stop and succeeds");
    let (ok, out) = cluster.down();
    assert!(ok, "{out}");
    assert!(out.contains("stopped 0 node(s)"), "{out}");
}

#[test]
fn a_node_whose_port_is_taken_says_so_in_words_cluster_up_retries_on() {
    tracing::info!("phase 1: a node configured on a port another socket holds");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (code, err) = cluster_harness::kvfabric().node_exit(&format!(
        "[node]\nid = 1\nhttp_listen = \"127.0.0.1:{port}\"\ndata_dir = \"data\"\n\n\
         [tiers]\nhost_bytes = \"16 MiB\"\n"
    ));
    tracing::info!("phase 2: it exits 1 with the reason `cluster up` starts again on");
    assert_eq!(code, Some(1), "{err}");
    assert!(kvfabric_tools::cluster::up::port_taken(&err), "{err}");
    assert!(!kvfabric_tools::cluster::up::port_taken(
        "listening on 127.0.0.1:80"
    ));
}
