//! `kvfabric cluster add|remove --dir DIR`: grow or shrink a running local cluster (one made
//! by `cluster up`) without stopping it.
//!
//! `add [--id N]`: issues node N's certificate from the cluster's CA (`certs/`), writes its
//! config (the others' `[cluster]` settings, every member including itself), starts it, and
//! asks a running member (`POST /v1/operator/members`, operator token) to add it: a learner,
//! caught up, a voter. The others' configs get the new member too, so that a later restart
//! of the whole cluster knows its addresses.
//!
//! `remove --node N`: asks another running member (`DELETE /v1/operator/members/nN`) to
//! remove N (a learner, drained: its blocks copied to the voters that lack them, out of the
//! Raft group), then stops N's process and takes it out of the configs (its config is kept as
//! `nodeN.removed.toml`, its data directory stays).
//!
//! A member that does not answer, or answers 503, is replaced by the next running one, until
//! `--timeout-s`; every step of a change is idempotent on the nodes, so a retry resumes.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use kvfabric_progress::{Progress, Unit};
use kvfabric_test_support::config::{MemberSection, NodeConfigFile};
use serde_json::{json, Value};

use super::{layout, procs, up, DIR_DEFAULT};

/// Most member configs looked for in a cluster directory.
const MEMBERS_MAX: u64 = 64;
/// Pause before asking the next member.
const RETRY_MS: u64 = 1_000;

/// Arguments of `kvfabric cluster add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The directory `cluster up` used.
    #[arg(long, default_value = DIR_DEFAULT)]
    dir: PathBuf,
    /// The new member's id (default: one above the highest).
    #[arg(long)]
    id: Option<u64>,
    /// Seconds to wait for the new member to be a ready voter.
    #[arg(long, default_value_t = 180)]
    timeout_s: u64,
}

/// Arguments of `kvfabric cluster remove`.
#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The directory `cluster up` used.
    #[arg(long, default_value = DIR_DEFAULT)]
    dir: PathBuf,
    /// The member to remove.
    #[arg(long)]
    node: u64,
    /// Seconds to wait for the removal (its drain included).
    #[arg(long, default_value_t = 900)]
    timeout_s: u64,
    /// Seconds to wait after SIGTERM before SIGKILL, once it is removed.
    #[arg(long, default_value_t = 10)]
    grace_s: u64,
}

/// The member configs in `dir`, by id.
fn configs(dir: &Path) -> anyhow::Result<Vec<(u64, NodeConfigFile)>> {
    let mut out = Vec::new();
    for id in 1..=MEMBERS_MAX {
        let path = layout::config_path(dir, id);
        if !path.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let c: NodeConfigFile =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        out.push((id, c));
    }
    if out.is_empty() {
        bail!(
            "{}: no member configs (nodeN.toml); run `kvfabric cluster up` first",
            dir.display()
        );
    }
    Ok(out)
}

fn write_config(dir: &Path, id: u64, c: &NodeConfigFile, why: &str) -> anyhow::Result<()> {
    let path = layout::config_path(dir, id);
    std::fs::write(&path, c.to_toml(why)).with_context(|| format!("writing {}", path.display()))
}

/// The API addresses of the running members other than `except`.
fn running_apis(dir: &Path, all: &[(u64, NodeConfigFile)], except: u64) -> Vec<(u64, String)> {
    all.iter()
        .filter(|(id, _)| *id != except)
        .filter(|(id, _)| {
            procs::read_pid(&layout::pid_path(dir, *id))
                .ok()
                .flatten()
                .is_some_and(|pid| procs::is_node(pid, &layout::config_path(dir, *id)))
        })
        .map(|(id, c)| (*id, format!("http://{}", c.node.http_listen)))
        .collect()
}

/// Sends the change to the running members in turn until one completes it or `limit` passes.
fn ask_members(
    apis: &[(u64, String)],
    token: &str,
    limit: Duration,
    bar: &Progress,
    send: impl Fn(&ureq::Agent, &str, &str) -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> anyhow::Result<Value> {
    anyhow::ensure!(!apis.is_empty(), "no other member is running to ask");
    let agent: ureq::Agent = kvfabric_http_client::agent(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(limit))
            .build(),
    );
    let auth = format!("Bearer {token}");
    let start = Instant::now();
    let mut last = String::new();
    for (i, (id, api)) in apis.iter().cycle().enumerate() {
        if start.elapsed() >= limit {
            break;
        }
        bar.message(format!("asking n{id} ({} tries)", i + 1));
        match send(&agent, api, &auth) {
            Ok(mut r) => {
                let status = r.status().as_u16();
                let body: Value = r
                    .body_mut()
                    .with_config()
                    .limit(1 << 20)
                    .read_to_vec()
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or(Value::Null);
                match status {
                    200 => return Ok(body),
                    409 | 400 | 401 | 403 => bail!("n{id} refused: {status} {body}"),
                    _ => last = format!("n{id} answered {status} {body}"),
                }
            }
            Err(e) => last = format!("n{id}: {e}"),
        }
        bar.line(format!("{last}; asking the next member"));
        std::thread::sleep(Duration::from_millis(RETRY_MS));
    }
    bail!("not done within {} s; last: {last}", limit.as_secs())
}

fn ids(v: &Value, key: &str) -> String {
    v[key]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Runs `kvfabric cluster add`.
pub fn add(a: AddArgs) -> anyhow::Result<()> {
    let dir = a
        .dir
        .canonicalize()
        .with_context(|| format!("resolving {}", a.dir.display()))?;
    let all = configs(&dir)?;
    let id =
        a.id.unwrap_or_else(|| all.iter().map(|(i, _)| *i).max().unwrap_or(0) + 1);
    anyhow::ensure!(
        (1..=MEMBERS_MAX).contains(&id),
        "--id: expected 1 to {MEMBERS_MAX}, found {id}"
    );
    if all.iter().any(|(i, _)| *i == id) {
        bail!("n{id} already has a config in {}", dir.display());
    }
    let token = layout::read_operator_token(&dir)?;
    let bar = Progress::new("cluster add", 3, Unit::Items("steps"));
    bar.message(format!("n{id}: certificate and config"));
    kvfabric_transport::ClusterCa::load(&dir.join("certs"))
        .and_then(|ca| ca.issue_into(&dir.join("certs"), &format!("node{id}")))
        .with_context(|| format!("issuing node{id}'s certificate"))?;
    let new = layout::plan_one(id)?;
    let template = &all[0].1;
    let member = MemberSection {
        id,
        api: new.api(),
        transport: new.transport,
        raft: new.raft,
    };
    let mut c = template.clone();
    c.node.id = id;
    c.node.http_listen = new.http.to_string();
    c.node.data_dir = layout::data_path(&dir, id);
    let cluster = c
        .cluster
        .as_mut()
        .context("the template config has no [cluster]")?;
    cluster.transport_listen = None;
    cluster.raft_listen = None;
    cluster.members.push(member.clone());
    write_config(
        &dir,
        id,
        &c,
        &format!("Written by `kvfabric cluster add`; node {id}."),
    )?;
    bar.inc(1);
    bar.message(format!("n{id}: starting"));
    let mut child = up::spawn(&dir, id)?;
    bar.inc(1);
    bar.message(format!("n{id}: a learner, catching up, a voter"));
    let apis = running_apis(&dir, &all, id);
    let body = json!({
        "id": id, "api": member.api, "transport": member.transport.to_string(),
        "raft": member.raft.to_string(),
    });
    let limit = Duration::from_secs(a.timeout_s);
    let done = ask_members(&apis, &token, limit, &bar, |agent, api, auth| {
        agent
            .post(format!("{api}/v1/operator/members"))
            .header("authorization", auth)
            .header("content-type", "application/json")
            .send(body.to_string().as_bytes())
    });
    let done = match done {
        Ok(v) => v,
        Err(e) => {
            if let Ok(Some(status)) = child.try_wait() {
                bail!(
                    "{e:#}; n{id} exited ({status}); its log: {}",
                    layout::log_path(&dir, id).display()
                );
            }
            bail!(
                "{e:#}; n{id} keeps running (pid {}), possibly as a learner: `kvfabric cluster remove --dir {} --node {id}` undoes the add",
                child.id(),
                dir.display()
            );
        }
    };
    for (other, mut oc) in all {
        if let Some(cl) = oc.cluster.as_mut() {
            if !cl.members.iter().any(|m| m.id == id) {
                cl.members.push(member.clone());
                write_config(
                    &dir,
                    other,
                    &oc,
                    &format!("Node {other}; n{id} added by `kvfabric cluster add`."),
                )?;
            }
        }
    }
    bar.inc(1);
    bar.finish();
    println!("n{id} {}", member.api);
    println!(
        "n{id} is a voter; voters {}; learners {}",
        ids(&done, "voters"),
        ids(&done, "learners")
    );
    Ok(())
}

/// Runs `kvfabric cluster remove`.
pub fn remove(a: RemoveArgs) -> anyhow::Result<()> {
    let dir = a
        .dir
        .canonicalize()
        .with_context(|| format!("resolving {}", a.dir.display()))?;
    let all = configs(&dir)?;
    let id = a.node;
    if !all.iter().any(|(i, _)| *i == id) {
        bail!("n{id} has no config in {}", dir.display());
    }
    let token = layout::read_operator_token(&dir)?;
    let bar = Progress::new("cluster remove", 2, Unit::Items("steps"));
    bar.message(format!("n{id}: a learner, draining, out of the group"));
    let apis = running_apis(&dir, &all, id);
    let limit = Duration::from_secs(a.timeout_s);
    let done = ask_members(&apis, &token, limit, &bar, |agent, api, auth| {
        agent
            .delete(format!("{api}/v1/operator/members/n{id}"))
            .header("authorization", auth)
            .call()
    })?;
    bar.inc(1);
    bar.message(format!("n{id}: stopping"));
    let config = layout::config_path(&dir, id);
    if let Some(pid) = procs::read_pid(&layout::pid_path(&dir, id))? {
        procs::stop(pid, &config, Duration::from_secs(a.grace_s))?;
        let _ = std::fs::remove_file(layout::pid_path(&dir, id));
    }
    let kept = dir.join(format!("node{id}.removed.toml"));
    std::fs::rename(&config, &kept)
        .with_context(|| format!("moving {} to {}", config.display(), kept.display()))?;
    for (other, mut oc) in all.into_iter().filter(|(i, _)| *i != id) {
        if let Some(cl) = oc.cluster.as_mut() {
            cl.members.retain(|m| m.id != id);
            write_config(
                &dir,
                other,
                &oc,
                &format!("Node {other}; n{id} removed by `kvfabric cluster remove`."),
            )?;
        }
    }
    bar.inc(1);
    bar.finish();
    println!(
        "n{id} removed ({} copies made while it drained); voters {}; learners {}",
        done["drained_copies"],
        ids(&done, "voters"),
        ids(&done, "learners")
    );
    Ok(())
}
