//! The SQLite ledger's schema: the migrations in `migrations/sqlite`, embedded in the
//! binary and applied at start with rusqlite, the ledger's one SQLite stack.
//!
//! They are recorded as sqlx's migrator records them (`_sqlx_migrations`: version,
//! description, SHA-384 of the script), which earlier builds used: a ledger file
//! they migrated opens here, and the applied scripts are checked against the ones
//! embedded, so an edited migration is refused rather than half-applied.

use rusqlite::{Connection, OptionalExtension};

use super::LedgerError;

/// One migration: its version, its description (the file name after the version,
/// `_` read as a space) and its script.
struct Migration {
    version: i64,
    description: &'static str,
    sql: &'static str,
}

macro_rules! migration {
    ($version:literal, $description:literal, $file:literal) => {
        Migration {
            version: $version,
            description: $description,
            sql: include_str!(concat!("../../../migrations/sqlite/", $file)),
        }
    };
}

/// Every migration, in order. A new one is a file in `migrations/sqlite` and a line
/// here (a test checks that the two agree).
const MIGRATIONS: [Migration; 12] = [
    migration!(1, "ledger", "0001_ledger.sql"),
    migration!(2, "tracker", "0002_tracker.sql"),
    migration!(3, "deliveries", "0003_deliveries.sql"),
    migration!(4, "fewer indexes", "0004_fewer_indexes.sql"),
    migration!(5, "trigger on finish", "0005_trigger_on_finish.sql"),
    migration!(6, "results", "0006_results.sql"),
    migration!(7, "money", "0007_money.sql"),
    migration!(8, "retention", "0008_retention.sql"),
    migration!(9, "keys by age", "0009_keys_by_age.sql"),
    migration!(10, "followers", "0010_followers.sql"),
    migration!(11, "closed days", "0011_closed_days.sql"),
    migration!(12, "webhook needs an id", "0012_webhook_needs_an_id.sql"),
];

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS _sqlx_migrations (
    version BIGINT PRIMARY KEY,
    description TEXT NOT NULL,
    installed_on TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    success BOOLEAN NOT NULL,
    checksum BLOB NOT NULL,
    execution_time BIGINT NOT NULL
)";

/// Bring the schema of `conn`'s database up to date.
pub(super) fn migrate(conn: &mut Connection) -> Result<(), LedgerError> {
    migrate_to(conn, i64::MAX)
}

/// Apply the migrations up to `last` (all of them: [`migrate`]). Each runs in a
/// transaction with its record: a crash leaves it applied and recorded, or neither.
pub(super) fn migrate_to(conn: &mut Connection, last: i64) -> Result<(), LedgerError> {
    conn.execute_batch(CREATE_TABLE)?;
    let dirty: Option<i64> = conn
        .query_row(
            "SELECT version FROM _sqlx_migrations WHERE success = false ORDER BY version LIMIT 1",
            [],
            |row| row.get(0),
        )
        .optional()?;
    if let Some(version) = dirty {
        return Err(refused(format!(
            "migration {version} was left partly applied; restore the file from a backup"
        )));
    }
    let applied: Vec<(i64, Vec<u8>)> = conn
        .prepare("SELECT version, checksum FROM _sqlx_migrations ORDER BY version")?
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (version, checksum) in &applied {
        match MIGRATIONS.iter().find(|m| m.version == *version) {
            None => {
                return Err(refused(format!(
                    "migration {version} was applied by a newer build of mediagate, which this build does not know"
                )));
            }
            Some(m) if checksum.as_slice() != sha384(m.sql).as_ref() => {
                return Err(refused(format!(
                    "migration {version} ({}) was applied with a different script than this build's",
                    m.description
                )));
            }
            Some(_) => {}
        }
    }
    for m in MIGRATIONS.iter().filter(|m| m.version <= last) {
        if applied.iter().any(|(version, _)| *version == m.version) {
            continue;
        }
        let started = std::time::Instant::now();
        let tx = conn.transaction()?;
        tx.execute_batch(m.sql)?;
        tx.execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (?1, ?2, TRUE, ?3, -1)",
            rusqlite::params![m.version, m.description, sha384(m.sql).as_ref()],
        )?;
        tx.commit()?;
        let nanos = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
        conn.execute(
            "UPDATE _sqlx_migrations SET execution_time = ?1 WHERE version = ?2",
            rusqlite::params![nanos, m.version],
        )?;
    }
    Ok(())
}

fn sha384(sql: &str) -> ring::digest::Digest {
    ring::digest::digest(&ring::digest::SHA384, sql.as_bytes())
}

fn refused(why: String) -> LedgerError {
    LedgerError::Unavailable(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_in_the_directory_is_listed_in_order_with_sqlx_s_description() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/sqlite");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        files.sort();
        assert_eq!(files.len(), MIGRATIONS.len(), "{files:?}");
        for (file, m) in files.iter().zip(&MIGRATIONS) {
            let (version, rest) = file.split_once('_').unwrap();
            assert_eq!(version.parse::<i64>().unwrap(), m.version, "{file}");
            assert_eq!(
                rest.trim_end_matches(".sql").replace('_', " "),
                m.description
            );
            let on_disk = std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
            assert_eq!(on_disk, m.sql, "{file} is the script embedded");
        }
    }

    /// Files migrated by sqlx's migrator (earlier builds) open here, and files
    /// migrated here open with sqlx's: the records are the same.
    #[tokio::test]
    async fn the_records_are_sqlx_s() {
        let dir = tempfile::tempdir().unwrap();
        let by_sqlx = dir.path().join("sqlx.db");
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&by_sqlx)
            .create_if_missing(true);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await
            .unwrap();
        let sqlx_migrator = sqlx::migrate!("migrations/sqlite");
        sqlx_migrator.run_to(3, &pool).await.unwrap();
        pool.close().await;

        // Three by sqlx, the rest here.
        let mut conn = Connection::open(&by_sqlx).unwrap();
        migrate(&mut conn).unwrap();
        let records = |conn: &Connection| -> Vec<(i64, String, bool, Vec<u8>)> {
            conn.prepare("SELECT version, description, success, checksum FROM _sqlx_migrations ORDER BY version")
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let mixed = records(&conn);
        assert_eq!(mixed.len(), MIGRATIONS.len());

        // All here, then sqlx finds nothing to do and nothing changed.
        let here = dir.path().join("here.db");
        let mut conn = Connection::open(&here).unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(records(&conn), mixed, "the same records as sqlx's");
        drop(conn);
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.filename(&here))
            .await
            .unwrap();
        sqlx_migrator.run(&pool).await.expect("sqlx accepts them");
        pool.close().await;
    }

    #[test]
    fn an_edited_or_unknown_migration_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        migrate(&mut conn).expect("a second start has nothing to do");
        conn.execute(
            "UPDATE _sqlx_migrations SET checksum = x'00' WHERE version = 2",
            [],
        )
        .unwrap();
        let e = migrate(&mut conn).unwrap_err().to_string();
        assert!(e.contains("migration 2 (tracker)"), "{e}");
        conn.execute(
            "UPDATE _sqlx_migrations SET checksum = ?1 WHERE version = 2",
            [sha384(MIGRATIONS[1].sql).as_ref()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) VALUES (99, 'later', TRUE, x'00', 1)",
            [],
        )
        .unwrap();
        let e = migrate(&mut conn).unwrap_err().to_string();
        assert!(e.contains("migration 99"), "{e}");
    }
}
