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
    let mut wrong = Vec::new();
    for (rel, source) in sources() {
        let top = rel.split('/').next().unwrap_or("").trim_end_matches(".rs");
        if ["lib", "main"].contains(&top) {
            continue;
        }
        let Some(own) = room_of(top) else {
            wrong.push(format!("{rel}: in no room of docs/architecture.md"));
            continue;
        };
        for used in modules_used(&source) {
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

/// Every `.rs` file under `src/`, with its path relative to `src/`.
fn sources() -> Vec<(String, String)> {
    let src = std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"));
    let mut found = Vec::new();
    let mut paths = vec![src.clone()];
    while let Some(path) = paths.pop() {
        if path.is_dir() {
            paths.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            found.push((rel, std::fs::read_to_string(&path).unwrap()));
        }
    }
    found
}

/// Functions outside tests whose body is longer than 80 lines: `file name lines`.
fn long_functions(file: &str, source: &str) -> Vec<String> {
    let lines: Vec<&str> = source.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| w[0].starts_with("#[cfg(test)]") && w[1].starts_with("mod tests"))
        .unwrap_or(lines.len());
    let mut long = Vec::new();
    let mut at = 0;
    while at < end {
        let line = lines[at];
        let code = line.trim_start();
        let indent = line.len() - code.len();
        let head = [
            "pub fn ",
            "pub(super) fn ",
            "pub(crate) fn ",
            "fn ",
            "async fn ",
            "pub async fn ",
            "pub(super) async fn ",
            "pub(crate) async fn ",
        ];
        let Some(name) = head.iter().find_map(|h| code.strip_prefix(h)) else {
            at += 1;
            continue;
        };
        let name = name.split(['(', '<']).next().unwrap_or("").to_string();
        let open =
            (at..end).find(|&i| lines[i].contains('{') || lines[i].trim_end().ends_with(';'));
        let Some(open) = open.filter(|&i| !lines[i].trim_end().ends_with(';')) else {
            at += 1;
            continue;
        };
        let close = (open + 1..end)
            .find(|&i| lines[i].starts_with(&format!("{}}}", " ".repeat(indent))))
            .unwrap_or(end);
        if close - at + 1 > 80 {
            long.push(format!("{file} {name} {}", close - at + 1));
        }
        at = close + 1;
    }
    long
}

#[test]
fn no_function_outside_tests_is_longer_than_80_lines() {
    let long: Vec<String> = sources()
        .iter()
        .flat_map(|(file, source)| long_functions(file, source))
        .collect();
    assert!(
        long.is_empty(),
        "functions over 80 lines:\n{}",
        long.join("\n")
    );
}
