//! What a client can make the gateway hold is bounded by the shipped schemas: every
//! string parameter has a `maxLength` (or a fixed set of values), every number a
//! `maximum` and every array a `maxItems`, so a validated submit is small whatever the body limit; and the body
//! limit itself leaves no room for an 8× JSON expansion to be held for long. (Peak
//! memory of 256 submits in flight is measured by `benches/memory.sh`.)

use serde_json::json;

use crate::support::{
    DEMO, Gateway, MODEL_CENTER, assert_error, shipped_routes, shipped_routes_file,
};

/// Every schema object under `value` (at `path`) that leaves a string or an array
/// unbounded.
fn unbounded(value: &toml::Value, path: &str, found: &mut Vec<String>) {
    let toml::Value::Table(table) = value else {
        if let toml::Value::Array(items) = value {
            for (i, item) in items.iter().enumerate() {
                unbounded(item, &format!("{path}[{i}]"), found);
            }
        }
        return;
    };
    let fixed = table.contains_key("enum") || table.contains_key("const");
    match table.get("type").and_then(toml::Value::as_str) {
        Some("string") if !fixed && !table.contains_key("maxLength") => {
            found.push(format!("{path}: a string without maxLength"));
        }
        Some("array") if !table.contains_key("maxItems") => {
            found.push(format!("{path}: an array without maxItems"));
        }
        Some("integer" | "number") if !fixed && !table.contains_key("maximum") => {
            found.push(format!("{path}: a number without maximum"));
        }
        _ => {}
    }
    for (key, child) in table {
        unbounded(child, &format!("{path}.{key}"), found);
    }
}

#[test]
fn every_shipped_string_number_and_array_is_bounded() {
    let routes: toml::Value = toml::from_str(&shipped_routes_file()).expect("routes.toml");
    let mut found = Vec::new();
    unbounded(&routes["schemas"], "schemas", &mut found);
    for (name, family) in routes["families"].as_table().expect("families") {
        if let Some(params) = family.get("params") {
            unbounded(params, &format!("families.{name}.params"), &mut found);
        }
        assert!(
            family.get("allow_unknown_params").is_none(),
            "families.{name} accepts parameters no schema bounds"
        );
    }
    assert!(
        found.is_empty(),
        "unbounded parameters:\n{}",
        found.join("\n")
    );
}

#[tokio::test]
async fn many_short_strings_are_refused_not_held() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    // Just under the body limit: some 150,000 one-character strings.
    let many: Vec<&str> = vec!["a"; 150_000];
    let body = json!({"model": "deltaq3-pro", "prompt": "p", "reference_images": many});
    let r = http.post_json(MODEL_CENTER, DEMO, &body).await;
    assert_error(&r, 400, "invalid_parameter", Some("reference_images"));
    // A long inline image is refused by its length, before any provider sees it.
    let inline = format!("data:image/png;base64,{}", "A".repeat(40_000));
    let body = json!({"model": "deltaq3-pro", "prompt": "p", "first_image": inline});
    let r = http.post_json(MODEL_CENTER, DEMO, &body).await;
    assert_error(&r, 400, "invalid_parameter", Some("first_image"));
}
