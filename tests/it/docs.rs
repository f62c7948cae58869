//! The documentation's examples work: the provider guide's ready-made blocks
//! (docs/providers.md) pass `mediagate check`.

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
