//! The documentation holds: the provider guide's ready-made blocks
//! (docs/providers.md) pass `mediagate check`, and the rooms of docs/architecture.md
//! depend only on the rooms listed before them.

use crate::support::{Routes, check, family};

#[test]
fn every_block_of_the_provider_guide_passes_check() {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/providers.md"))
        .expect("docs/providers.md");
    let blocks: Vec<&str> = guide
        .split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split_once("```").map(|(block, _)| block))
        .collect();
    assert_eq!(blocks.len(), 8, "one block per shape (a)-(h)");
    let names: Vec<String> = blocks
        .iter()
        .flat_map(|b| b.lines())
        .filter_map(|l| l.strip_prefix("[providers.")?.strip_suffix(']'))
        .filter(|n| !n.contains('.'))
        .map(str::to_string)
        .collect();
    assert_eq!(names.len(), 8, "{names:?}");
    let routes = names.iter().enumerate().fold(
        blocks
            .iter()
            .fold(Routes::new(), |routes, block| routes.provider(block)),
        |routes, (i, n)| {
            routes.family(family(n, &[n], &[&format!("m{i}")]).upstream(&format!("m{i}"), "up"))
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("routes.toml");
    std::fs::write(&file, routes.render()).unwrap();
    let env = [
        "NEXT_GATEWAY_KEY",
        "JOBS_API_KEY",
        "TASKS_API_KEY",
        "ASYNC_API_KEY",
        "WRAPPED_API_TOKEN",
        "FILES_API_KEY",
        "OPERATIONS_API_KEY",
        "QUEUE_API_KEY",
    ]
    .map(|var| (var, "k"));
    let out = check(dir.path(), &file, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("8 providers"));
}

/// The rooms of `src/`, in the order of docs/architecture.md's table (the foundation's
/// files and the process layer named by file).
fn rooms() -> Vec<(String, Vec<String>)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/architecture.md"))
        .expect("docs/architecture.md");
    doc.lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split_once(" | "))
        .filter(|(room, _)| *room != "room" && !room.starts_with("---"))
        .map(|(room, files)| {
            let room = room.trim_matches('`').trim_end_matches('/').to_string();
            // A room of single files (foundation, process) is its files' modules.
            let modules = match room.as_str() {
                "foundation" | "process" => files
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .filter_map(|f| f.strip_suffix(".rs"))
                    .map(str::to_string)
                    .collect(),
                _ => vec![room.clone()],
            };
            (room, modules)
        })
        .collect()
}

/// Each `crate::module` a source file names outside comments and its tests.
fn modules_used(source: &str) -> Vec<String> {
    let code = source
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or(source);
    code.lines()
        .map(|l| l.split("//").next().unwrap_or(l))
        .flat_map(|l| l.match_indices("crate::").map(move |(at, _)| &l[at + 7..]))
        .map(|rest| {
            rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("")
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn each_room_uses_only_the_rooms_listed_before_it() {
    let rooms = rooms();
    let names: Vec<&str> = rooms.iter().map(|(r, _)| r.as_str()).collect();
    assert!(
        names.starts_with(&["foundation", "config", "tasks"]),
        "{names:?}"
    );
    let room_of = |module: &str| {
        rooms
            .iter()
            .position(|(_, m)| m.iter().any(|m| m == module))
    };
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
    let mut wrong = Vec::new();
    let mut files = vec![std::path::PathBuf::from(src)];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let rel = path
            .strip_prefix(src)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let top = rel
            .split('/')
            .next()
            .unwrap_or("")
            .trim_end_matches(".rs")
            .to_string();
        if ["lib", "main"].contains(&top.as_str()) {
            continue;
        }
        let Some(own) = room_of(&top) else {
            wrong.push(format!("{rel}: in no room of docs/architecture.md"));
            continue;
        };
        for used in modules_used(&std::fs::read_to_string(&path).unwrap()) {
            if let Some(theirs) = room_of(&used)
                && theirs > own
            {
                wrong.push(format!(
                    "{rel} ({}) uses {used} ({})",
                    names[own], names[theirs]
                ));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "arrows that run the wrong way:\n{}",
        wrong.join("\n")
    );
}
