//! `mediagate check FILE`: exit 0 on a good routes file; on a broken one a non-zero
//! exit and, for every problem, the file name, the key path and what is wrong.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{replace_once, shipped_routes_file};

/// Run `mediagate check` on `routes` written as `name` in a fresh directory (also the
/// working directory). Returns the output and the file's path as the tool prints it.
fn check(name: &str, routes: &str) -> (Output, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::write(&path, routes).expect("write routes");
    let out = run_check(dir.path(), &path);
    // Checking writes nothing, not even the task secret a first start would create.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from(name)], "check wrote files");
    (out, path.display().to_string())
}

fn run_check(cwd: &Path, path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mediagate"))
        .arg("check")
        .arg(path)
        .current_dir(cwd)
        .env_remove("MEDIAGATE_TASK_SECRET")
        .output()
        .expect("run mediagate check")
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
    let (out, file) = check("routes.toml", &shipped_routes_file());
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains(&file), "{all}");
    assert!(all.contains("ok"), "{all}");
    assert!(all.contains("44 models"), "{all}");
}

#[test]
fn a_broken_jq_program_is_named_by_its_key() {
    let routes = replace_once(
        &shipped_routes_file(),
        "status = '.status'\n\n[providers.simulator.query]",
        "status = '.status |'\n\n[providers.simulator.query]",
    );
    let (out, file) = check("broken-jq.toml", &routes);
    assert_refused(&out, &file, &[&["providers.simulator.submit.status", "jq"]]);
}

#[test]
fn an_unknown_provider_in_a_family_is_named() {
    let routes = replace_once(
        &shipped_routes_file(),
        "[families.theta]\nkind = \"video\"\nproviders = [\"simulator\"]",
        "[families.theta]\nkind = \"video\"\nproviders = [\"simulatr\"]",
    );
    let (out, file) = check("unknown-provider.toml", &routes);
    assert_refused(&out, &file, &[&["families.theta.providers", "simulatr"]]);
}

#[test]
fn an_invalid_json_schema_is_named() {
    let routes = replace_once(
        &shipped_routes_file(),
        "params.properties.duration = { type = \"integer\", minimum = 1, maximum = 16 }",
        "params.properties.duration = { type = \"integr\", minimum = 1, maximum = 16 }",
    );
    let (out, file) = check("bad-schema.toml", &routes);
    assert_refused(&out, &file, &[&["families.delta", "JSON Schema"]]);
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
    let (out, file) = check("typo.toml", &routes);
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
    let (out, file) = check("typo-family.toml", &routes);
    assert_refused(&out, &file, &[&[&format!("line {line}")]]);
    assert!(
        text(&out).contains("unknown field `provider`"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_bad_key_digest_is_named() {
    for bad in [
        "f77894fdfa58e447c57e077eaa9708e8e009c84dc6aba2db80461275e9b85bzz",
        "f77894fdfa58e447",
        "sk-demo",
    ] {
        let routes = replace_once(
            &shipped_routes_file(),
            "f77894fdfa58e447c57e077eaa9708e8e009c84dc6aba2db80461275e9b85be7",
            bad,
        );
        let (out, file) = check("bad-key.toml", &routes);
        assert_refused(&out, &file, &[&["keys[0].sha256", "64 hex"]]);
    }
}

#[test]
fn every_problem_of_a_file_is_reported_at_once() {
    let routes = shipped_routes_file();
    let routes = replace_once(
        &routes,
        "status = '.status'\n\n[providers.simulator.query]",
        "status = '.status |'\n\n[providers.simulator.query]",
    );
    let routes = replace_once(
        &routes,
        "[families.theta]\nkind = \"video\"\nproviders = [\"simulator\"]",
        "[families.theta]\nkind = \"video\"\nproviders = [\"simulatr\"]",
    );
    let routes = replace_once(
        &routes,
        "8210bbdaf0d08ca288d5c2fdd81f5a36d0367239ef386a952c245048d844561d",
        "nothex",
    );
    let (out, file) = check("many.toml", &routes);
    assert_refused(
        &out,
        &file,
        &[
            &["providers.simulator.submit.status"],
            &["families.theta.providers"],
            &["keys[1].sha256"],
        ],
    );
}

#[test]
fn a_missing_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.toml");
    let out = run_check(dir.path(), &path);
    assert_refused(&out, &path.display().to_string(), &[&[]]);
}

#[test]
fn two_keys_with_the_same_secret_are_refused() {
    let routes = shipped_routes_file().replace(
        "8210bbdaf0d08ca288d5c2fdd81f5a36d0367239ef386a952c245048d844561d",
        "f77894fdfa58e447c57e077eaa9708e8e009c84dc6aba2db80461275e9b85be7",
    );
    let (out, file) = check("routes.toml", &routes);
    assert_refused(&out, &file, &[&["keys[1].sha256", "same secret"]]);
}

#[test]
fn a_short_task_secret_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("routes.toml");
    std::fs::write(&path, shipped_routes_file()).expect("write routes");
    let out = Command::new(env!("CARGO_BIN_EXE_mediagate"))
        .arg("check")
        .arg(&path)
        .current_dir(dir.path())
        .env("MEDIAGATE_TASK_SECRET", "hunter2")
        .output()
        .expect("run mediagate check");
    let file = path.display().to_string();
    assert_refused(&out, &file, &[&["tasks.secret_env", "shorter than 32"]]);
    assert!(!text(&out).contains("hunter2"), "the secret was printed");
}
