//! Loading routes files: the shipped one mutated line by line, and any text at all, is
//! compiled or refused with problems; never a panic.

use mediagate::snapshot::{LoadContext, Snapshot};
use proptest::prelude::*;

fn shipped() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/routes.toml")).unwrap()
}

/// One change to a routes file.
#[derive(Debug, Clone)]
enum Change {
    Delete(prop::sample::Index),
    Duplicate(prop::sample::Index),
    /// The value of a `key = value` line replaced.
    Value(prop::sample::Index, String),
    Truncate(prop::sample::Index),
}

fn change() -> impl Strategy<Value = Change> {
    let value = prop_oneof![
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("18446744073709551615".to_string()),
        Just("\"\"".to_string()),
        Just("[]".to_string()),
        Just("{}".to_string()),
        Just("'.['".to_string()),
        Just("'$ENV'".to_string()),
        Just("'env'".to_string()),
        Just("\"ftp://x\"".to_string()),
        Just("\"builtin:simulator\"".to_string()),
        Just("{ type = \"string\", maxLength = -1 }".to_string()),
        "\"\\PC{0,20}\"".prop_map(|s| s.replace('\\', "")),
        "'\\PC{0,20}'".prop_map(|s| s.replace('\'', "")),
    ];
    prop_oneof![
        any::<prop::sample::Index>().prop_map(Change::Delete),
        any::<prop::sample::Index>().prop_map(Change::Duplicate),
        (any::<prop::sample::Index>(), value).prop_map(|(i, v)| Change::Value(i, v)),
        any::<prop::sample::Index>().prop_map(Change::Truncate),
    ]
}

fn apply(text: &str, changes: &[Change]) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for c in changes {
        if lines.is_empty() {
            break;
        }
        match c {
            Change::Delete(i) => {
                lines.remove(i.index(lines.len()));
            }
            Change::Duplicate(i) => {
                let at = i.index(lines.len());
                lines.insert(at, lines[at].clone());
            }
            Change::Value(i, v) => {
                let at = i.index(lines.len());
                if let Some((key, _)) = lines[at].split_once(" = ") {
                    lines[at] = format!("{key} = {v}");
                }
            }
            Change::Truncate(i) => lines.truncate(i.index(lines.len()) + 1),
        }
    }
    lines.join("\n")
}

fn load(text: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("routes.toml");
    std::fs::write(&path, text).unwrap();
    // `check` mode: nothing is created, no simulator started, nothing listens.
    let _ = Snapshot::load(&path, &LoadContext::default());
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Each case compiles a whole file (every jq program and schema): an eighth of
        // the cases the other properties get.
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .map_or(32, |n| (n / 8).max(16)),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_shipped_file_changed_is_loaded_or_refused(changes in prop::collection::vec(change(), 1..6)) {
        load(&apply(&shipped(), &changes));
    }

    #[test]
    fn any_text_is_loaded_or_refused(text in "(\\[[a-z.]{0,20}\\]\n|[a-z_]{1,12} = (\"\\PC{0,10}\"|[0-9]{1,5}|true)\n|\\PC{0,30}\n){0,20}") {
        load(&text);
    }
}
