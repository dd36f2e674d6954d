//! A PostgreSQL connection of a remote store and the statements prepared
//! on it.
//!
//! A statement a handle sends on every commit (the write's rows, the reads
//! before and under the lock) is prepared once per connection: the server
//! then neither parses nor analyses it again, and sends only its
//! parameters' values. Everything else goes unnamed, as before.

use std::collections::{HashMap, HashSet};
use std::ops::{Deref, DerefMut};

use postgres::types::Type;
use postgres::{Client, Statement};

/// A connection and what was prepared on it, which goes with it: a
/// connection made again (after a server restart) prepares again.
pub(super) struct Conn {
    client: Client,
    prepared: HashMap<String, Statement>,
    /// Names prepared with SQL `PREPARE` (for `EXECUTE` in a simple query).
    sql_prepared: HashSet<&'static str>,
    /// Whether this connection's role may wait for a flush after the
    /// write lock (`write.rs`, [`super::write::FLUSH`]); asked once.
    pub(super) flush_after: Option<bool>,
}

impl Conn {
    pub(super) fn new(client: Client) -> Conn {
        Conn {
            client,
            prepared: HashMap::new(),
            sql_prepared: HashSet::new(),
            flush_after: None,
        }
    }

    /// `sql`, with parameters of `types`, prepared on this connection the
    /// first time it is asked for.
    pub(super) fn prepared(
        &mut self,
        sql: &str,
        types: &[Type],
    ) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare_typed(sql, types)?;
        self.prepared.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    /// `PREPARE name decl` (`decl`: the parameters' types, `AS`, the
    /// statement) the first time it is asked for on this connection.
    pub(super) fn prepare_sql(
        &mut self,
        name: &'static str,
        decl: &str,
    ) -> Result<(), postgres::Error> {
        if self.sql_prepared.contains(name) {
            return Ok(());
        }
        self.client
            .batch_execute(&format!("PREPARE {name} {decl}"))?;
        self.sql_prepared.insert(name);
        Ok(())
    }
}

impl Deref for Conn {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}
