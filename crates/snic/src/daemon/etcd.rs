//! The pool's one desired state in etcd (node.yaml `pool.etcd`).
//!
//! Every object is a key under the pool's prefix (`PREFIX objects/KIND/NAME`, its manifest
//! document as JSON), beside the ids (`PREFIX meta/ids`) and a revision key (`PREFIX meta/rev`)
//! that every apply writes. An apply is one etcd transaction, guarded by that key's revision
//! as this node last saw it: two nodes applying at once cannot interleave (the second is
//! refused, and applies again on the state the first wrote). A node watches the prefix; on any
//! change it loads the whole state and deploys it if its revision moved (level-triggered, so a
//! watch that missed events, was cut, or came up after a change still converges).
//!
//! etcd is reached from a thread of its own with its own async runtime: the daemon's calls
//! ([`Etcd::load`], [`Etcd::save`]) wait for its answer at most [`TIMEOUT`], so an etcd without
//! quorum fails an apply with a clear error and holds nothing else up.

use super::persist::Change;
use snic_control::manifest::{object_from_value, Object};
use snic_control::state::{Ids, State};
use std::sync::mpsc as std_mpsc;
use std::sync::Mutex;
use std::time::Duration;

/// How long a load or a save waits for etcd.
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// Why the state store refused a change.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another node changed the pool's state since this node loaded it.
    #[error("the pool's desired state changed since this node loaded it (another node applied); it is being loaded here: apply again")]
    Conflict,
    /// etcd did not answer or refused.
    #[error("etcd: {0}")]
    Unavailable(String),
}

enum Op {
    Put(String, String),
    Delete(String),
}

/// What a load read: the objects (key, JSON), the ids, and the revision key's revision.
struct Loaded {
    objects: Vec<(String, String)>,
    ids: Option<String>,
    rev: i64,
}

enum Req {
    Load(std_mpsc::Sender<Result<Loaded, String>>),
    Save { ops: Vec<Op>, expect: i64, reply: std_mpsc::Sender<Result<Result<i64, ()>, String>> },
}

/// The pool's state in etcd, as this node reaches it. See the module docs.
pub struct Etcd {
    tx: tokio::sync::mpsc::UnboundedSender<Req>,
    prefix: String,
    /// Tells the node to load the pool's state (after a save another node's write refused).
    nudge: std_mpsc::Sender<()>,
    /// The revision key's revision in the state this node runs (0: none yet).
    rev: Mutex<i64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Etcd {
    /// Starts the etcd thread for `endpoints` and `prefix`; `changed` is told whenever the
    /// prefix may have changed (a watch event, or the watch (re)starting).
    pub fn start(endpoints: Vec<String>, prefix: String, changed: std_mpsc::Sender<()>) -> anyhow::Result<Etcd> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let (p, nudge) = (prefix.clone(), changed.clone());
        let thread = std::thread::Builder::new().name("snic-etcd".into()).spawn(move || run(endpoints, p, rx, changed))?;
        Ok(Etcd { tx, prefix, nudge, rev: Mutex::new(0), thread: Some(thread) })
    }

    fn ask<T>(&self, make: impl FnOnce(std_mpsc::Sender<Result<T, String>>) -> Req) -> Result<T, StoreError> {
        let (reply, answer) = std_mpsc::channel();
        self.tx.send(make(reply)).map_err(|_| StoreError::Unavailable("the etcd thread is gone".into()))?;
        match answer.recv_timeout(TIMEOUT + Duration::from_secs(1)) {
            Ok(r) => r.map_err(StoreError::Unavailable),
            Err(_) => Err(StoreError::Unavailable(format!("no answer within {} s", TIMEOUT.as_secs()))),
        }
    }

    /// Loads the pool's state; remembers its revision as the one this node runs.
    pub fn load(&self) -> anyhow::Result<State> {
        let (state, rev) = self.fetch()?;
        *self.rev.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = rev;
        Ok(state)
    }

    /// The pool's state if it changed since this node last loaded or saved it (its revision
    /// is then remembered).
    pub fn changed(&self) -> anyhow::Result<Option<State>> {
        let (state, rev) = self.fetch()?;
        let mut mine = self.rev.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *mine == rev {
            return Ok(None);
        }
        *mine = rev;
        Ok(Some(state))
    }

    fn fetch(&self) -> anyhow::Result<(State, i64)> {
        let l = self.ask(Req::Load)?;
        let objects_at = format!("{}objects/", self.prefix);
        let mut objects: Vec<Object> = Vec::new();
        for (i, (k, doc)) in l.objects.iter().filter(|(k, _)| k.starts_with(&objects_at)).enumerate() {
            let value: serde_json::Value = serde_json::from_str(doc).map_err(|e| anyhow::anyhow!("etcd key {k}: {e}"))?;
            objects.push(object_from_value(i, value).map_err(|e| anyhow::anyhow!("etcd key {k}: {e}"))?);
        }
        let ids: Ids = match &l.ids {
            Some(v) => serde_json::from_str(v)?,
            None => Ids::default(),
        };
        let state = State::restore(objects, ids).map_err(|e| anyhow::anyhow!("the pool's state in etcd is invalid: {e}"))?;
        Ok((state, l.rev))
    }

    /// Writes `new` where `old` is, in one transaction guarded by the revision this node runs.
    pub fn save(&self, old: &State, new: &State) -> Result<(), StoreError> {
        let key = |o: &Object| format!("{}objects/{}/{}", self.prefix, o.kind.as_str(), o.name);
        let mut ops: Vec<Op> = super::persist::changes(old, new)
            .into_iter()
            .map(|c| match c {
                Change::Put(o) => Op::Put(key(o), o.to_document().to_string()),
                Change::Remove(o) => Op::Delete(key(o)),
            })
            .collect();
        if old.ids() != new.ids() {
            let ids = serde_json::to_string(new.ids()).map_err(|e| StoreError::Unavailable(e.to_string()))?;
            ops.push(Op::Put(format!("{}meta/ids", self.prefix), ids));
        }
        let expect = *self.rev.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match self.ask(|reply| Req::Save { ops, expect, reply })? {
            Ok(rev) => {
                *self.rev.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = rev;
                Ok(())
            }
            Err(()) => {
                // Load what the other node wrote now, not only when the watch says so.
                let _ = self.nudge.send(());
                Err(StoreError::Conflict)
            }
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // Closing the channel ends the thread's loop.
        let (tx, _) = tokio::sync::mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.tx, tx));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The key just past every key that starts with `prefix` (etcd's range end for a prefix).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

type Client = etcdv3client::EtcdClient;

/// A client error in a line: the gRPC status's code and message, without the transport's
/// nested sources.
fn short(e: &etcdv3client::Error) -> String {
    let s = e.to_string();
    let s = s.split(", source:").next().unwrap_or(&s).trim_end_matches([' ', '}']);
    s.replace("[Grpc] Status { ", "").replace("code: ", "").replace(", message: ", ": ")
}

async fn connect(endpoints: &[String]) -> Result<Client, String> {
    match tokio::time::timeout(TIMEOUT, Client::new(endpoints.to_vec(), None::<(String, String)>)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(format!("connecting to {}: {}", endpoints.join(", "), short(&e))),
        Err(_) => Err(format!("connecting to {}: no answer within {} s", endpoints.join(", "), TIMEOUT.as_secs())),
    }
}

fn run(endpoints: Vec<String>, prefix: String, mut rx: tokio::sync::mpsc::UnboundedReceiver<Req>, changed: std_mpsc::Sender<()>) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "etcd: no runtime; the pool's state cannot be reached");
            return;
        }
    };
    rt.block_on(async move {
        let watch = tokio::spawn(watch(endpoints.clone(), prefix.clone(), changed));
        let mut client: Option<Client> = None;
        while let Some(req) = rx.recv().await {
            if client.is_none() {
                match connect(&endpoints).await {
                    Ok(c) => client = Some(c),
                    Err(e) => {
                        refuse(req, e);
                        continue;
                    }
                }
            }
            let c = client.as_mut().expect("connected above");
            let ok = match req {
                Req::Load(reply) => {
                    let r = within(load(c, &prefix)).await;
                    let ok = r.is_ok();
                    let _ = reply.send(r);
                    ok
                }
                Req::Save { ops, expect, reply } => {
                    let r = within(save(c, &prefix, ops, expect)).await;
                    let ok = r.is_ok();
                    let _ = reply.send(r);
                    ok
                }
            };
            if !ok {
                // Connect afresh next time (etcd restarted, or a member went away).
                client = None;
            }
        }
        watch.abort();
    });
}

fn refuse(req: Req, why: String) {
    match req {
        Req::Load(reply) => {
            let _ = reply.send(Err(why));
        }
        Req::Save { reply, .. } => {
            let _ = reply.send(Err(why));
        }
    }
}

async fn within<T>(f: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    match tokio::time::timeout(TIMEOUT, f).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} s (no quorum?)", TIMEOUT.as_secs())),
    }
}

async fn load(c: &mut Client, prefix: &str) -> Result<Loaded, String> {
    use etcdv3client::pb::RangeRequest;
    let r =
        c.kv.range(RangeRequest { key: prefix.as_bytes().to_vec(), range_end: prefix_end(prefix), ..Default::default() })
            .await
            .map_err(|e| format!("reading {prefix}: {}", short(&e)))?;
    let (mut objects, mut ids, mut rev) = (Vec::new(), None, 0);
    let (rev_key, ids_key) = (format!("{prefix}meta/rev"), format!("{prefix}meta/ids"));
    for kv in r.kvs {
        let k = String::from_utf8_lossy(&kv.key).into_owned();
        let v = String::from_utf8_lossy(&kv.value).into_owned();
        if k == rev_key {
            rev = kv.mod_revision;
        } else if k == ids_key {
            ids = Some(v);
        } else {
            objects.push((k, v));
        }
    }
    Ok(Loaded { objects, ids, rev })
}

/// One transaction: if the revision key is still at `expect`, the operations and a new write of
/// the revision key. `Ok(Ok(rev))`: done, the new revision; `Ok(Err(()))`: another writer was
/// first.
async fn save(c: &mut Client, prefix: &str, ops: Vec<Op>, expect: i64) -> Result<Result<i64, ()>, String> {
    use etcdv3client::pb::{compare, request_op, Compare, DeleteRangeRequest, PutRequest, RequestOp, TxnRequest};
    let put = |k: String, v: String| RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest { key: k.into_bytes(), value: v.into_bytes(), ..Default::default() })),
    };
    let rev_key = format!("{prefix}meta/rev");
    let mut success: Vec<RequestOp> = ops
        .into_iter()
        .map(|op| match op {
            Op::Put(k, v) => put(k, v),
            Op::Delete(k) => RequestOp {
                request: Some(request_op::Request::RequestDeleteRange(DeleteRangeRequest { key: k.into_bytes(), ..Default::default() })),
            },
        })
        .collect();
    success.push(put(rev_key.clone(), String::new()));
    let guard = Compare {
        key: rev_key.into_bytes(),
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Mod as i32,
        target_union: Some(compare::TargetUnion::ModRevision(expect)),
        ..Default::default()
    };
    let r =
        c.kv.txn(TxnRequest { compare: vec![guard], success, failure: Vec::new() })
            .await
            .map_err(|e| format!("the transaction failed: {}", short(&e)))?;
    if !r.succeeded {
        return Ok(Err(()));
    }
    Ok(Ok(r.header.map_or(0, |h| h.revision)))
}

/// Watches the prefix; tells `changed` when it starts (it may have missed changes) and on every
/// event. Reconnects after a second when the watch ends or fails.
async fn watch(endpoints: Vec<String>, prefix: String, changed: std_mpsc::Sender<()>) {
    let mut logged = false;
    loop {
        let attempt = async {
            let mut c = connect(&endpoints).await?;
            let mut w = c.watch.do_watch(prefix.as_bytes().to_vec()).with_range_end(prefix_end(&prefix)).await.map_err(|e| short(&e))?;
            if changed.send(()).is_err() {
                return Ok(());
            }
            tracing::info!(prefix = %prefix, "etcd: watching the pool's desired state");
            while let Some(resp) = w.message().await.map_err(|e| short(&e))? {
                if (!resp.events.is_empty() || resp.canceled) && changed.send(()).is_err() {
                    return Ok(());
                }
                if resp.canceled {
                    break;
                }
            }
            Err::<(), String>("the watch ended".into())
        };
        match attempt.await {
            Ok(()) => return,
            Err(e) => {
                if !logged {
                    tracing::warn!(error = %e, "etcd: not watching the pool's desired state; retrying every second");
                    logged = true;
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_just_past_its_last_key() {
        assert_eq!(prefix_end("/snic/"), b"/snic0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }
}
