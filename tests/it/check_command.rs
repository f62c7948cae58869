//! `mediagate check FILE`: exit 0 on a good routes file; on a broken one a non-zero
//! exit and, for every problem, the file name, the key path and what is wrong.

use std::process::Output;

use crate::support::{DEMO, DEMO2, check, family, replace_once, sha256_hex, shipped_routes_file};

/// Run `mediagate check` on `routes` written as `name` in a fresh directory (also the
/// working directory). Returns the output and the file's path as the tool prints it.
fn check_file(name: &str, routes: &str) -> (Output, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, routes).expect("write routes");
    let out = check(dir.path(), &path, &[]);
    // Checking writes nothing, not even the task secret a first start would create.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from(name)], "check wrote files");
    (out, path.display().to_string())
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The check fails, and its output has `file`, then each of `lines`' parts on one line.
#[track_caller]
fn assert_refused(out: &Output, file: &str, lines: &[&[&str]]) {
    let all = text(out);
    assert!(!out.status.success(), "check passed a broken file:\n{all}");
    for parts in lines {
        assert!(
            all.lines()
                .any(|line| line.contains(file) && parts.iter().all(|p| line.contains(p))),
            "no line with {file} and {parts:?} in:\n{all}"
        );
    }
}

/// 1-based line of the first line of `text` containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle in text")
        + 1
}

#[test]
fn the_shipped_routes_file_passes() {
    let (out, file) = check_file("routes.toml", &shipped_routes_file());
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains(&file), "{all}");
    assert!(all.contains("ok"), "{all}");
    assert!(all.contains("44 models"), "{all}");
}

#[test]
fn a_misspelt_field_is_refused_with_its_line() {
    // In a provider table.
    let routes = replace_once(
        &shipped_routes_file(),
        "submit_timeout_ms = 10000",
        "submit_timout_ms = 10000",
    );
    let line = line_of(&routes, "submit_timout_ms");
    let (out, file) = check_file("typo.toml", &routes);
    assert_refused(&out, &file, &[&[&format!("line {line}")]]);
    let all = text(&out);
    assert!(
        all.contains("unknown field `submit_timout_ms`"),
        "names the field: {all}"
    );
    assert!(
        all.contains("submit_timeout_ms"),
        "says what is allowed: {all}"
    );

    // In a family table.
    let routes = replace_once(
        &shipped_routes_file(),
        "[families.kappa]\nkind = \"video\"\nproviders = [\"simulator\"]",
        "[families.kappa]\nkind = \"video\"\nprovider = [\"simulator\"]",
    );
    let line = line_of(&routes, "provider = [");
    let (out, file) = check_file("typo-family.toml", &routes);
    assert_refused(&out, &file, &[&[&format!("line {line}")]]);
    assert!(
        text(&out).contains("unknown field `provider`"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_bad_key_digest_is_named() {
    let digest = sha256_hex(DEMO);
    for bad in [&format!("{}zz", &digest[..62]), &digest[..16], DEMO] {
        let routes = replace_once(&shipped_routes_file(), &sha256_hex(DEMO), bad);
        let (out, file) = check_file("bad-key.toml", &routes);
        assert_refused(&out, &file, &[&["keys[0].sha256", "64 hex"]]);
    }
}

/// A provider whose every program is broken, and a family with an invalid schema. (A
/// family serving the provider is added beside it.)
const BROKEN_PROVIDER: &str = r#"
[providers.broken]
base_url = "http://127.0.0.1:9"
[providers.broken.submit]
path = '"/tasks"'
body = '{model: $upstream_model'
id = '.id'
success = '$nope == 1'
[providers.broken.query]
path = '"/tasks/\($id)"'
status = 'frobnicate(.status)'
status_map = {}
[providers.broken.result]
path = '"/files"'
urls = '.[] |'
[providers.broken.content]
path = '"/c"'
public_base_url = "ftp://example.com"

[families.badschema]
kind = "video"
providers = ["broken"]
models = ["m2"]
params = { type = 12 }
"#;

#[test]
fn every_problem_of_a_file_is_reported_at_once() {
    let routes = [
        // A broken jq program of the shipped provider.
        (
            "status = '.status'\n\n[providers.simulator.query]",
            "status = '.status |'\n\n[providers.simulator.query]",
        ),
        // An unknown provider in a family.
        (
            "[families.theta]\nkind = \"video\"\nproviders = [\"simulator\"]",
            "[families.theta]\nkind = \"video\"\nproviders = [\"simulatr\"]",
        ),
        // A key digest that is no digest.
        (&sha256_hex(DEMO2), "nothex"),
        // An invalid JSON Schema in a family's parameters.
        (
            "params.properties.duration = { type = \"integer\", minimum = 1, maximum = 16 }",
            "params.properties.duration = { type = \"integr\", minimum = 1, maximum = 16 }",
        ),
    ]
    .iter()
    .fold(shipped_routes_file(), |text, (from, to)| {
        replace_once(&text, from, to)
    }) + BROKEN_PROVIDER
        + &family("f", &["broken"], &["m1"]).to_string();
    let (out, file) = check_file("many.toml", &routes);
    assert_refused(
        &out,
        &file,
        &[
            &["providers.simulator.submit.status", "jq"],
            &["families.theta.providers", "simulatr"],
            &["keys[1].sha256", "64 hex"],
            &["families.delta", "JSON Schema"],
            &["providers.broken.submit.body: jq: expected"],
            &["providers.broken.submit.success: jq: undefined variable `$nope`"],
            &["providers.broken.query.status: jq: undefined filter `frobnicate`"],
            &["providers.broken.query.status_map: must map every upstream status word"],
            &["providers.broken.result.urls: jq:"],
            &["providers.broken.content.public_base_url: must be an http"],
            &["families.badschema.params: invalid JSON Schema"],
            &["check failed"],
        ],
    );
}

#[test]
fn a_missing_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.toml");
    let out = check(dir.path(), &path, &[]);
    assert_refused(&out, &path.display().to_string(), &[&[]]);
}

#[test]
fn two_keys_with_the_same_secret_are_refused() {
    let routes = replace_once(
        &shipped_routes_file(),
        &sha256_hex(DEMO2),
        &sha256_hex(DEMO),
    );
    let (out, file) = check_file("routes.toml", &routes);
    assert_refused(&out, &file, &[&["keys[1].sha256", "same secret"]]);
}

#[test]
fn a_short_task_secret_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("routes.toml");
    std::fs::write(&path, shipped_routes_file()).expect("write routes");
    let out = check(dir.path(), &path, &[("MEDIAGATE_TASK_SECRET", "hunter2")]);
    let file = path.display().to_string();
    assert_refused(&out, &file, &[&["tasks.secret_env", "shorter than 32"]]);
    assert!(!text(&out).contains("hunter2"), "the secret was printed");
}
