//! The persistent desired state, in redb. Every apply or delete writes the objects it changed
//! (and the ids) in one write transaction, so a crash leaves the old state or the new, never a
//! mix; the daemon stores only states that validated and planned. A change writes what it
//! changed, not the whole state: re-serializing a firewall of 10,000 rules took 90 ms on every
//! apply, whatever the apply was about.

use anyhow::Context;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use snic_control::manifest::{object_from_value, Object};
use snic_control::state::{Ids, State};
use std::path::Path;

const OBJECTS: TableDefinition<&str, &str> = TableDefinition::new("objects");
const META: TableDefinition<&str, &str> = TableDefinition::new("meta");

/// The state database.
pub struct Db {
    db: Database,
}

impl Db {
    /// Opens (creating) `dir/state.redb`.
    pub fn open(dir: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("state.redb");
        let db = Database::create(&path).with_context(|| format!("opening {}", path.display()))?;
        Ok(Db { db })
    }

    /// Loads the stored state (empty on first start).
    pub fn load(&self) -> anyhow::Result<State> {
        let txn = self.db.begin_read()?;
        let objects = match txn.open_table(OBJECTS) {
            Ok(t) => {
                let mut v = Vec::new();
                for (i, row) in t.iter()?.enumerate() {
                    let (k, doc) = row?;
                    let value: serde_json::Value =
                        serde_json::from_str(doc.value()).with_context(|| format!("stored object {}", k.value()))?;
                    v.push(object_from_value(i, value).map_err(|e| anyhow::anyhow!("stored object {}: {e}", k.value()))?);
                }
                v
            }
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(State::default()),
            Err(e) => return Err(e.into()),
        };
        let ids: Ids = match txn.open_table(META) {
            Ok(t) => match t.get("ids")? {
                Some(v) => serde_json::from_str(v.value())?,
                None => Ids::default(),
            },
            Err(redb::TableError::TableDoesNotExist(_)) => Ids::default(),
            Err(e) => return Err(e.into()),
        };
        State::restore(objects, ids).map_err(|e| anyhow::anyhow!("stored state is invalid: {e}"))
    }

    /// Stores `new` where `old` is stored, atomically, writing only the objects that differ.
    pub fn save_change(&self, old: &State, new: &State) -> anyhow::Result<()> {
        let key = |o: &Object| format!("{}/{}", o.kind.as_str(), o.name);
        let txn = self.db.begin_write()?;
        {
            let mut t = txn.open_table(OBJECTS)?;
            for c in changes(old, new) {
                match c {
                    Change::Put(o) => t.insert(key(o).as_str(), o.to_document().to_string().as_str())?,
                    Change::Remove(o) => t.remove(key(o).as_str())?,
                };
            }
            if old.ids() != new.ids() {
                let mut m = txn.open_table(META)?;
                m.insert("ids", serde_json::to_string(new.ids())?.as_str())?;
            }
        }
        txn.commit()?;
        Ok(())
    }
}

/// One object a change writes: created or replaced, or removed.
pub enum Change<'a> {
    /// In the new state, and not the same in the old.
    Put(&'a Object),
    /// In the old state only.
    Remove(&'a Object),
}

/// What turns `old` into `new`, object by object (the ids apart), in one pass over both: they
/// iterate in (kind, name) order, so the smaller key is in one state only.
pub fn changes<'a>(old: &'a State, new: &'a State) -> Vec<Change<'a>> {
    let mut out = Vec::new();
    let (mut a, mut b) = (old.objects().peekable(), new.objects().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some(x), Some(y)) if (x.kind, &x.name) == (y.kind, &y.name) => {
                if x != y {
                    out.push(Change::Put(y));
                }
                a.next();
                b.next();
            }
            (Some(x), Some(y)) if (x.kind, &x.name) < (y.kind, &y.name) => {
                out.push(Change::Remove(x));
                a.next();
            }
            (Some(x), None) => {
                out.push(Change::Remove(x));
                a.next();
            }
            (_, Some(y)) => {
                out.push(Change::Put(y));
                b.next();
            }
        }
    }
    out
}

/// Where the desired state lives: this node's own database, or the pool's etcd.
pub enum Store {
    /// `state_dir/state.redb`.
    Local(Db),
    /// The pool's etcd (node.yaml `pool.etcd`).
    Etcd(super::etcd::Etcd),
}

impl Store {
    /// Loads the stored state.
    pub fn load(&self) -> anyhow::Result<State> {
        match self {
            Store::Local(db) => db.load(),
            Store::Etcd(e) => e.load(),
        }
    }

    /// With etcd, the pool's state if another node changed it since this node loaded or saved
    /// it; a node alone has no one else to change it.
    pub fn changed(&self) -> anyhow::Result<Option<State>> {
        match self {
            Store::Local(_) => Ok(None),
            Store::Etcd(e) => e.changed(),
        }
    }

    /// Stores `new` where `old` is stored, atomically (with etcd: refused with
    /// [`super::etcd::StoreError`] if another node changed it first, or etcd cannot be reached).
    pub fn save_change(&self, old: &State, new: &State) -> anyhow::Result<()> {
        match self {
            Store::Local(db) => db.save_change(old, new),
            Store::Etcd(e) => Ok(e.save(old, new)?),
        }
    }
}
