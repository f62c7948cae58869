//! Apps discover what they may call: the model lists (`GET {models}`, one model by its
//! percent-encoded id) with the JSON Schema each model's parameters are validated
//! with; the OpenAPI 3.1 document generated from the routes file (`/openapi.json`,
//! `mediagate openapi`), valid against the official schema and true to the gateway's
//! real answers; and the parameter tables of docs/api.md, generated from the shipped
//! routes file.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use http::Method;
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

use crate::support::{
    ALPHA, ConfigDir, DEMO, DEMO2, Gateway, Http, MODEL_CENTER, Reply, Routes, assert_error,
    operator, shipped_routes, shipped_routes_file,
};

const MC_MODELS: &str = "/v2/model-center/models";
const ALPHA_MODELS: &str = "/v1/alpha/models";

fn encode(id: &str) -> String {
    utf8_percent_encode(id, NON_ALPHANUMERIC).to_string()
}

fn ids(list: &Value) -> Vec<&str> {
    list["data"]
        .as_array()
        .expect("data is an array")
        .iter()
        .map(|m| m["id"].as_str().expect("id is a string"))
        .collect()
}

/// A model list answer: 200, the collection shape, one page.
#[track_caller]
fn model_list(r: &Reply) -> Value {
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["has_more"], false);
    let ids = ids(&v);
    assert_eq!(v["first_id"], json!(ids.first()));
    assert_eq!(v["last_id"], json!(ids.last()));
    v
}

#[tokio::test]
async fn model_lists_show_the_models_the_key_may_submit_there() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();

    let alpha = model_list(&http.get(ALPHA_MODELS, DEMO).await);
    let all_alpha = [
        "alpha2Stable",
        "alphaOpen2",
        "alphaOpen2Plus",
        "alphaOpen2Stable",
    ];
    assert_eq!(ids(&alpha), all_alpha);
    let center = model_list(&http.get(MC_MODELS, DEMO).await);
    let center_ids = ids(&center);
    // 32 published models and the 8 of the introduction published here too, by id.
    assert_eq!(center_ids.len(), 40, "{center_ids:?}");
    assert!(center_ids.is_sorted());
    for id in [
        "eta 1.1 v2 图生视频",
        "kappa O3 视频生成",
        "deltaq3-pro",
        "zeta-5.0",
    ] {
        assert!(center_ids.contains(&id), "{id} missing");
    }
    assert!(!center_ids.contains(&"alpha2Stable"));

    for item in center["data"].as_array().unwrap() {
        let keys: BTreeSet<&str> = item.as_object().unwrap().keys().map(|k| &**k).collect();
        // A priced model (the shipped `zeta` and `gamma-2-0-special` families) says how.
        let priced = [
            "zeta_5.0Pro",
            "zeta-5.0",
            "sd_2.0_fast_special",
            "sd_2.0_mini_special",
            "sd_2.0_special",
        ];
        if priced.contains(&item["id"].as_str().unwrap()) {
            assert_eq!(
                keys,
                BTreeSet::from(["id", "object", "kind", "parameters", "price"])
            );
            assert_eq!(item["price"]["currency"], "USD");
            assert!(
                item["price"]["description"]
                    .as_str()
                    .unwrap()
                    .starts_with("0.0"),
                "{item}"
            );
        } else {
            assert_eq!(keys, BTreeSet::from(["id", "object", "kind", "parameters"]));
        }
        assert_eq!(item["object"], "model");
        let params = &item["parameters"];
        assert_eq!(params["properties"]["model"]["const"], item["id"]);
        assert_eq!(params["required"][0], "model");
        assert_eq!(params["additionalProperties"], false);
    }
    let find = |list: &Value, id: &str| {
        list["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} not listed"))
    };
    assert_eq!(find(&center, "zeta_5.0Pro")["kind"], "image");
    let gamma = find(&center, "gamma_1_5_pro_720p");
    assert_eq!(gamma["kind"], "video");
    assert_eq!(gamma["parameters"]["properties"]["resolution"], false);
    assert_eq!(gamma["parameters"]["properties"]["duration"]["maximum"], 10);
    let stable = &find(&alpha, "alpha2Stable")["parameters"]["properties"];
    assert_eq!(stable["seconds"]["enum"], json!([10, 15]));

    // A restricted key sees only its own models.
    let alpha = model_list(&http.get(ALPHA_MODELS, DEMO2).await);
    assert_eq!(ids(&alpha), all_alpha);
    let center = model_list(&http.get(MC_MODELS, DEMO2).await);
    assert_eq!(
        ids(&center),
        [
            "gamma_1_5_pro_1080p",
            "gamma_1_5_pro_480p",
            "gamma_1_5_pro_720p",
            "zeta-5.0",
            "zeta_5.0Pro"
        ]
    );

    let r = http.get_bare(MC_MODELS).await;
    assert_error(&r, 401, "missing_api_key", None);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    gw.assert_no_panic();
}

#[tokio::test]
async fn a_model_by_percent_encoded_id_and_unknown_or_forbidden_ones_alike() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let eta = "eta 1.0 参考生视频";

    let r = http
        .get(&format!("{MC_MODELS}/{}", encode(eta)), DEMO)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let one = r.json();
    assert_eq!(one["id"], eta);
    assert_eq!(one["object"], "model");
    assert_eq!(one["kind"], "video");
    assert_eq!(one["parameters"]["properties"]["model"]["const"], eta);
    // The same as in the list.
    let list = http.get(MC_MODELS, DEMO).await.json();
    let listed = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == eta);
    assert_eq!(Some(&one), listed);
    let r = http
        .get(&format!("{ALPHA_MODELS}/alphaOpen2Plus"), DEMO2)
        .await;
    assert_eq!(
        r.json()["parameters"]["properties"]["seconds"]["enum"],
        json!([4, 8, 12])
    );

    // Unknown, not allowed for the key, served on the other endpoint, or not an id
    // at all: one answer.
    for (path, key) in [
        (format!("{MC_MODELS}/{}", encode(eta)), DEMO2),
        (format!("{MC_MODELS}/nope"), DEMO),
        (format!("{MC_MODELS}/alpha2Stable"), DEMO),
        (format!("{ALPHA_MODELS}/zeta-5.0"), DEMO),
        (format!("{MC_MODELS}/eta%201.0"), DEMO),
        (format!("{MC_MODELS}/%FF%FE"), DEMO),
        (format!("{MC_MODELS}/%E5%8F"), DEMO),
        (format!("{MC_MODELS}/%zz%"), DEMO),
        (format!("{MC_MODELS}/%00"), DEMO),
        (format!("{MC_MODELS}/a%2Fb"), DEMO),
    ] {
        let r = http.get(&path, key).await;
        assert_error(&r, 404, "model_not_found", Some("id"));
    }
    // The id's spaces must be encoded: a raw one is not a valid request line.
    for path in [format!("{MC_MODELS}/"), format!("{MC_MODELS}/a/b")] {
        assert_error(&http.get(&path, DEMO).await, 404, "not_found", None);
    }
    let auth = format!("Bearer {DEMO}");
    for method in [Method::POST, Method::DELETE] {
        let r = http
            .send(
                method,
                &format!("{MC_MODELS}/zeta-5.0"),
                &[("authorization", &auth)],
                Bytes::new(),
            )
            .await;
        assert_error(&r, 405, "method_not_allowed", None);
        assert_eq!(r.header("allow"), Some("GET, HEAD"));
    }
    let r = http
        .send(
            Method::HEAD,
            MC_MODELS,
            &[("authorization", &auth)],
            Bytes::new(),
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    gw.assert_no_panic();
}

/// Bodies that probe every kind of limit of the shipped schemas.
fn probes() -> Vec<Value> {
    let image = "https://example.com/a.png";
    let mut probes = vec![
        json!({}),
        json!({"prompt": ""}),
        json!({"prompt": 5}),
        json!({"prompt": "a cat", "colour": "red"}),
        json!({"prompt": "a cat", "aspect_ratio": "16:9"}),
        json!({"prompt": "a cat", "aspect_ratio": "16x9"}),
        json!({"prompt": "a cat", "size": "1024x1024"}),
        json!({"prompt": "a cat", "generate_audio": true}),
        json!({"prompt": "a cat", "first_image": "ftp://x"}),
        json!({"prompt": "a cat", "reference_images": vec![image; 7]}),
        json!({"prompt": "a cat", "reference_images": vec![image; 8]}),
    ];
    for seconds in [4, 10, 12, 15, 16] {
        probes.push(json!({"prompt": "a cat", "seconds": seconds}));
    }
    for duration in [1, 5, 6, 10, 16, 20, 30, 31] {
        probes.push(json!({"prompt": "a cat", "duration": duration}));
    }
    for resolution in ["480p", "540p", "720p", "1080p", "4k"] {
        probes.push(json!({"prompt": "a cat", "resolution": resolution}));
    }
    probes
}

#[tokio::test]
async fn listed_parameters_are_what_submits_are_validated_with() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let mut seen = Vec::new();
    let mut checked = 0;
    for (models, submit) in [(MC_MODELS, MODEL_CENTER), (ALPHA_MODELS, ALPHA)] {
        for model in http.get(models, DEMO).await.json()["data"]
            .as_array()
            .unwrap()
        {
            // One model of each schema is enough.
            let mut own = model["parameters"].clone();
            own["properties"].as_object_mut().unwrap().remove("model");
            if seen.contains(&own) {
                continue;
            }
            seen.push(own);
            let schema = jsonschema::validator_for(&model["parameters"]).expect("a JSON Schema");
            for mut body in probes() {
                body["model"] = model["id"].clone();
                let r = http.post_json(submit, DEMO, &body).await;
                let valid = schema.is_valid(&body);
                assert_eq!(r.status == 200, valid, "{body} → {} {}", r.status, r.text());
                if !valid {
                    assert_eq!(r.status, 400, "{body}: {}", r.text());
                }
                checked += 1;
            }
        }
    }
    // Every family of the shipped file has its own limits but a few.
    assert!(seen.len() >= 8, "{} schemas", seen.len());
    assert!(checked > 200);
    gw.assert_no_panic();
}

/// The vendored JSON Schema of OpenAPI 3.1 (see tests/it/data/README.md).
fn openapi_schema() -> jsonschema::Validator {
    let text = include_str!("data/openapi-3.1.schema.json");
    let schema: Value = serde_json::from_str(text).expect("the OpenAPI 3.1 schema");
    jsonschema::validator_for(&schema).expect("the OpenAPI 3.1 schema compiles")
}

/// `/openapi.json`, fetched without a key.
async fn served_document(http: &Http) -> Value {
    let r = http.get_bare("/openapi.json").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    r.json()
}

/// Every `"$ref"` in `v`.
fn refs<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::String(to)) = map.get("$ref") {
                out.push(to);
            }
            map.values().for_each(|v| refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

/// The operations of the document: (path, method) → operation.
fn operations(doc: &Value) -> BTreeMap<(String, String), &Value> {
    let mut ops = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            ops.insert((path.clone(), method.clone()), op);
        }
    }
    ops
}

#[tokio::test]
async fn the_document_is_valid_openapi_3_1() {
    let gw = Gateway::start(shipped_routes()).await;
    let doc = served_document(&gw.client()).await;

    let errors: Vec<String> = openapi_schema()
        .iter_errors(&doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "not OpenAPI 3.1: {errors:#?}");
    assert_eq!(doc["openapi"], "3.1.0");
    // The check has teeth: a response without a description, a parameter in the body.
    let mut broken = doc.clone();
    let health = &mut broken["paths"]["/healthz"]["get"];
    health["responses"]["200"]
        .as_object_mut()
        .unwrap()
        .remove("description");
    assert!(!openapi_schema().is_valid(&broken));
    let mut broken = doc.clone();
    broken["paths"][MODEL_CENTER]["get"]["parameters"][0]["in"] = json!("body");
    assert!(!openapi_schema().is_valid(&broken));
    // The OpenAPI schema leaves Schema Objects open: each must be JSON Schema 2020-12.
    for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
        assert!(jsonschema::meta::is_valid(schema), "{name}: {schema}");
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    for to in all {
        let pointer = to.strip_prefix('#').expect("local references only");
        assert!(doc.pointer(pointer).is_some(), "{to} does not resolve");
    }

    let ops = operations(&doc);
    let paths: BTreeSet<(&str, &str)> = ops.keys().map(|(p, m)| (p.as_str(), m.as_str())).collect();
    let mut expected = BTreeSet::new();
    for (tasks, models) in [(MODEL_CENTER, MC_MODELS), (ALPHA, ALPHA_MODELS)] {
        expected.insert((tasks.to_string(), "post"));
        expected.insert((tasks.to_string(), "get"));
        expected.insert((format!("{tasks}/{{id}}"), "get"));
        expected.insert((format!("{tasks}/{{id}}"), "delete"));
        expected.insert((format!("{tasks}/{{id}}/content"), "get"));
        expected.insert((format!("{tasks}/{{id}}/content/{{n}}"), "get"));
        expected.insert((models.to_string(), "get"));
        expected.insert((format!("{models}/{{id}}"), "get"));
    }
    for usage in ["/v2/usage", "/v1/alpha/usage", "/v1/usage"] {
        expected.insert((usage.to_string(), "get"));
    }
    for (path, method) in [
        ("/v1/videos", "post"),
        ("/v1/videos", "get"),
        ("/v1/videos/{id}", "get"),
        ("/v1/videos/{id}", "delete"),
        ("/v1/videos/{id}/content", "get"),
        ("/v1/videos/{id}/remix", "post"),
        ("/v1/videos/inputs/{name}", "get"),
        ("/v1/models", "get"),
        ("/v1/models/{id}", "get"),
    ] {
        expected.insert((path.to_string(), method));
    }
    // `/metrics` is on the admin listener unless a metrics token opens it here.
    for public in ["/healthz", "/readyz", "/openapi.json"] {
        expected.insert((public.to_string(), "get"));
    }
    let expected: BTreeSet<(&str, &str)> = expected.iter().map(|(p, m)| (p.as_str(), *m)).collect();
    assert_eq!(paths, expected);
    let ids: BTreeSet<&str> = ops
        .values()
        .map(|op| op["operationId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), ops.len(), "operation ids are unique");

    // Bearer everywhere, but for the operational routes.
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    assert_eq!(doc["security"], json!([{"bearer": []}]));
    for ((path, _), op) in &ops {
        // An upload's signed link stands in for the key: its provider has none.
        let public = [
            "/healthz",
            "/readyz",
            "/openapi.json",
            "/metrics",
            "/v1/videos/inputs/{name}",
        ]
        .contains(&path.as_str());
        assert_eq!(op.get("security") == Some(&json!([])), public, "{path}");
        assert_eq!(op["responses"].get("401").is_some(), !public, "{path}");
    }
    // Listing pages like the task listing does.
    let list = ops[&(MODEL_CENTER.to_string(), "get".to_string())];
    let names: Vec<&str> = list["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["limit", "after"]);
    let headers = &ops[&(MODEL_CENTER.to_string(), "post".to_string())]["responses"];
    assert_eq!(headers["429"]["headers"]["Retry-After"]["required"], true);
    assert_eq!(headers["409"]["headers"]["Retry-After"]["required"], true);
    assert_eq!(
        headers["401"]["headers"]["WWW-Authenticate"]["required"],
        true
    );
    gw.assert_no_panic();
}

#[tokio::test]
async fn the_submit_body_is_one_schema_per_model_told_apart_by_model() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let doc = served_document(&http).await;
    for (tasks, models) in [(MODEL_CENTER, MC_MODELS), (ALPHA, ALPHA_MODELS)] {
        let body = &doc["paths"][tasks]["post"]["requestBody"];
        assert_eq!(body["required"], true);
        let schema = &body["content"]["application/json"]["schema"];
        assert_eq!(schema["discriminator"]["propertyName"], "model");
        let listed = http.get(models, DEMO).await.json();
        let mut named = Vec::new();
        for one in schema["oneOf"].as_array().unwrap() {
            let to = one["$ref"].as_str().expect("a named schema per model");
            let target = doc.pointer(to.strip_prefix('#').unwrap()).unwrap();
            let id = target["properties"]["model"]["const"]
                .as_str()
                .expect("a const model");
            assert_eq!(schema["discriminator"]["mapping"][id], to);
            // The model list's schema, as the gateway validates it.
            let item = listed["data"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["id"] == id)
                .unwrap();
            assert_eq!(target, &item["parameters"], "{id}");
            named.push(id);
        }
        assert_eq!(named, ids(&listed), "{tasks}: every model, once");
    }
    // Component names are made of the ids, spaces and Chinese characters spelled out.
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    assert!(schemas.contains_key("Submit.eta_1.0_u53C2u8003u751Fu89C6u9891"));
    assert!(schemas.contains_key("Submit.sd_2.0_special"));
    gw.assert_no_panic();
}

/// The error table of docs/api.md: `code` → HTTP status.
fn codes_in_the_api_guide() -> BTreeMap<String, String> {
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md")).unwrap();
    let errors = guide.split("## Errors").nth(1).expect("an Errors section");
    let mut codes = BTreeMap::new();
    for row in errors
        .lines()
        .filter(|l| l.starts_with("| 4") || l.starts_with("| 5"))
    {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        for code in cells[2].split(',') {
            codes.insert(
                code.trim().trim_matches('`').to_string(),
                cells[1].to_string(),
            );
        }
    }
    codes
}

/// The codes an error answer's schema allows.
fn error_codes(resp: &Value) -> Vec<String> {
    let schema = &resp["content"]["application/json"]["schema"];
    assert_eq!(schema["allOf"][0]["$ref"], "#/components/schemas/Error");
    let codes = schema
        .pointer("/properties/error/properties/code/enum")
        .expect("codes");
    codes
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn every_refusal_of_the_api_guide_is_in_the_document() {
    let gw = Gateway::start(shipped_routes()).await;
    let doc = served_document(&gw.client()).await;
    let mut in_doc: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for op in operations(&doc).values() {
        for (status, resp) in op["responses"].as_object().unwrap() {
            // Successes, and a stored result's redirect and 304: no refusals.
            if status.starts_with('2') || status.starts_with('3') {
                continue;
            }
            for code in error_codes(resp) {
                in_doc.entry(code).or_default().insert(status.clone());
            }
        }
    }
    // 405 answers a method the document does not list for a path: documented once.
    let unlisted = &doc["components"]["responses"]["MethodNotAllowed"];
    assert_eq!(error_codes(unlisted), ["method_not_allowed"]);
    assert_eq!(unlisted["headers"]["Allow"]["required"], true);
    in_doc.insert("method_not_allowed".into(), BTreeSet::from(["405".into()]));

    let guide = codes_in_the_api_guide();
    let documented: BTreeSet<&String> = in_doc.keys().collect();
    assert_eq!(
        documented,
        guide.keys().collect(),
        "the guide's error table and the document differ"
    );
    for (code, statuses) in &in_doc {
        assert_eq!(statuses, &BTreeSet::from([guide[code].clone()]), "{code}");
    }
    assert_eq!(in_doc["model_not_found"], BTreeSet::from(["404".into()]));
    gw.assert_no_panic();
}

/// Checks answers against the document: the status is documented for the operation,
/// the required headers are there and every documented header present has a value of
/// its schema, the content type is documented, the body has the documented schema.
struct Conformance {
    doc: Value,
}

impl Conformance {
    /// A schema of the document, checkable on its own: its references resolve in
    /// the document, which rides along under a keyword that validation ignores.
    fn validator(&self, schema: &Value) -> jsonschema::Validator {
        let root = json!({"components": self.doc["components"], "allOf": [schema]});
        jsonschema::validator_for(&root).expect("the document's schema compiles")
    }

    fn resolve<'d>(&'d self, v: &'d Value) -> &'d Value {
        match v["$ref"].as_str() {
            Some(to) => self.doc.pointer(to.strip_prefix('#').unwrap()).unwrap(),
            None => v,
        }
    }

    #[track_caller]
    fn check(&self, path: &str, method: &str, r: &Reply) {
        let op = &self.doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is not documented");
        let status = r.status.as_str();
        let resp = op["responses"]
            .get(status)
            .unwrap_or_else(|| panic!("{method} {path}: {status} is undocumented: {}", r.text()));
        for (name, header) in resp["headers"].as_object().unwrap() {
            let header = self.resolve(header);
            match r.header(name) {
                None => assert_ne!(
                    header["required"], true,
                    "{method} {path} {status}: no {name}"
                ),
                Some(value) => {
                    let value = match header["schema"]["type"].as_str() {
                        Some("integer") => json!(value.parse::<u64>().expect("an integer header")),
                        _ => json!(value),
                    };
                    let valid = self.validator(&header["schema"]).is_valid(&value);
                    assert!(valid, "{method} {path} {status}: {name}: {value}");
                }
            }
        }
        let content = resp["content"].as_object().unwrap();
        let ty = r.header("content-type").unwrap_or("");
        let essence = ty.split(';').next().unwrap().trim();
        let media = content
            .get(essence)
            .or_else(|| content.get("*/*"))
            .unwrap_or_else(|| panic!("{method} {path} {status}: {ty} is undocumented"));
        if essence == "application/json" {
            let body = r.json();
            let errors: Vec<String> = self
                .validator(&media["schema"])
                .iter_errors(&body)
                .map(|e| e.to_string())
                .collect();
            assert!(
                errors.is_empty(),
                "{method} {path} {status}: {body}: {errors:?}"
            );
        }
    }
}

#[tokio::test]
async fn real_answers_conform_to_the_document() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let c = Conformance {
        doc: served_document(&http).await,
    };
    // References resolve, and a wrong body is caught.
    let task = c.validator(&json!({"$ref": "#/components/schemas/Task"}));
    assert!(!task.is_valid(&json!({"id": 5})));
    assert!(
        !task.is_valid(&json!({"id": "t", "object": "video", "model": "m",
        "status": "done", "created": 1, "urls": [], "error": null}))
    );
    let auth = format!("Bearer {DEMO}");
    let demo_auth = auth.as_str();

    // A task's whole life, on both endpoints.
    let tasks = [
        (
            MODEL_CENTER,
            json!({"model": "zeta-5.0", "prompt": "a cat"}),
        ),
        (
            ALPHA,
            json!({"model": "alpha2Stable", "prompt": "a fox", "seconds": 10}),
        ),
    ];
    for (path, body) in &tasks {
        let r = http.post_json(path, DEMO, body).await;
        c.check(path, "post", &r);
        let id = r.json()["id"].as_str().unwrap().to_string();
        let one = format!("{path}/{{id}}");
        c.check(&one, "get", &http.get(&format!("{path}/{id}"), DEMO).await);
        http.wait_done(path, DEMO, &id).await;
        let r = http.get(&format!("{path}/{id}"), DEMO).await;
        assert_eq!(r.json()["status"], "completed");
        c.check(&one, "get", &r);
        c.check(path, "get", &http.get(path, DEMO).await);
        c.check(
            path,
            "get",
            &http.get(&format!("{path}?limit=1&after={id}"), DEMO).await,
        );
        // The simulator's results need no key: nothing to download here.
        let content = format!("{path}/{id}/content");
        c.check(
            &format!("{one}/content"),
            "get",
            &http.get(&content, DEMO).await,
        );
    }
    let r = http
        .post_json(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "zeta-5.0", "prompt": "[fail] a cat"}),
        )
        .await;
    let id = r.json()["id"].as_str().unwrap().to_string();
    let failed = http.wait_done(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(failed["status"], "failed");
    let r = http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await;
    c.check(&format!("{MODEL_CENTER}/{{id}}"), "get", &r);

    // Found by schemathesis, and documented: an `after` that is not one of the key's
    // ids, and an `Idempotency-Key` reused with another body.
    for query in ["after=%C3%91&limit=18", "limit=0", "limit=101", "limit=x"] {
        let r = http.get(&format!("{MODEL_CENTER}?{query}"), DEMO).await;
        let param = if query.starts_with("after") {
            "after"
        } else {
            "limit"
        };
        assert_error(&r, 400, "invalid_parameter", Some(param));
        c.check(MODEL_CENTER, "get", &r);
    }
    let mut headers = vec![
        ("content-type", "application/json"),
        ("authorization", demo_auth),
        ("idempotency-key", "0"),
    ];
    let first = json!({"model": "alphaOpen2Stable", "prompt": "0", "seconds": 8});
    for (body, status) in [
        (&first, 200),
        (&first, 200),
        (&json!({"model": "alphaOpen2", "prompt": "0"}), 422),
    ] {
        let r = http
            .send(Method::POST, ALPHA, &headers, body.to_string())
            .await;
        assert_eq!(r.status, status, "{}", r.text());
        c.check(ALPHA, "post", &r);
    }
    headers.pop();
    headers.push(("idempotency-key", "\"\""));
    let r = http
        .send(Method::POST, ALPHA, &headers, first.to_string())
        .await;
    assert_error(&r, 400, "invalid_idempotency_key", None);
    c.check(ALPHA, "post", &r);

    // Refusals of submits: (body, content type, key, code).
    let bad_bodies = [
        ("{", "application/json", Some(demo_auth), "invalid_json"),
        (
            "{}",
            "text/plain",
            Some(demo_auth),
            "unsupported_media_type",
        ),
        (
            r#"{"model":"nope"}"#,
            "application/json",
            Some(demo_auth),
            "unknown_model",
        ),
        (
            r#"{"model":"zeta-5.0"}"#,
            "application/json",
            None,
            "missing_api_key",
        ),
    ];
    for (body, content_type, auth, code) in bad_bodies {
        let mut headers = vec![("content-type", content_type)];
        headers.extend(auth.map(|a| ("authorization", a)));
        let r = http
            .send(Method::POST, MODEL_CENTER, &headers, body.to_string())
            .await;
        assert_eq!(r.error_code(), code, "{}", r.text());
        c.check(MODEL_CENTER, "post", &r);
    }
    let r = http
        .post_json(
            MODEL_CENTER,
            DEMO2,
            &json!({"model": "sd_2.0_special", "prompt": "a"}),
        )
        .await;
    assert_error(&r, 403, "model_not_allowed", Some("model"));
    c.check(MODEL_CENTER, "post", &r);
    let r = http
        .post_json(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "deltaq3-pro", "prompt": "a", "duration": 17}),
        )
        .await;
    assert_error(&r, 400, "invalid_parameter", Some("duration"));
    c.check(MODEL_CENTER, "post", &r);

    // Unknown tasks, their content, models.
    for path in [format!("{ALPHA}/task_nope"), format!("{ALPHA}/%00")] {
        c.check(
            &format!("{ALPHA}/{{id}}"),
            "get",
            &http.get(&path, DEMO).await,
        );
        let content = format!("{path}/content");
        c.check(
            &format!("{ALPHA}/{{id}}/content"),
            "get",
            &http.get(&content, DEMO).await,
        );
    }
    c.check(ALPHA_MODELS, "get", &http.get(ALPHA_MODELS, DEMO).await);
    c.check(
        ALPHA_MODELS,
        "get",
        &http.get(ALPHA_MODELS, "sk-wrong").await,
    );
    let one = format!("{MC_MODELS}/{{id}}");
    c.check(
        &one,
        "get",
        &http
            .get(
                &format!("{MC_MODELS}/{}", encode("kappa O3 视频生成")),
                DEMO,
            )
            .await,
    );
    c.check(
        &one,
        "get",
        &http.get(&format!("{MC_MODELS}/nope"), DEMO).await,
    );

    // The operational routes, without a key.
    for path in ["/healthz", "/readyz", "/openapi.json"] {
        c.check(path, "get", &http.get_bare(path).await);
    }
    gw.assert_no_panic();
}

#[tokio::test]
async fn the_document_and_the_lists_follow_a_reload() {
    let gw = Gateway::start(Routes::simulated(&["m1"])).await;
    let http = gw.client();
    let doc = served_document(&http).await;
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    assert!(schemas.contains_key("Submit.m1") && !schemas.contains_key("Submit.m 2"));
    assert_eq!(ids(&http.get(MC_MODELS, DEMO).await.json()), ["m1"]);

    gw.reload_with(&Routes::simulated(&["m1", "m 2"]).render())
        .await
        .unwrap();
    let doc = served_document(&http).await;
    let body =
        &doc["paths"][MODEL_CENTER]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert_eq!(
        body["discriminator"]["mapping"]["m 2"],
        "#/components/schemas/Submit.m_2"
    );
    assert_eq!(ids(&http.get(MC_MODELS, DEMO).await.json()), ["m 2", "m1"]);
    let r = http.get(&format!("{MC_MODELS}/m%202"), DEMO).await;
    assert_eq!(r.json()["id"], "m 2");
    // No model on the alpha endpoint: an empty page, and a body no model matches.
    let alpha = model_list(&http.get(ALPHA_MODELS, DEMO).await);
    assert_eq!(alpha["first_id"], Value::Null);
    let alpha_body =
        &doc["paths"][ALPHA]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert!(alpha_body.get("oneOf").is_none());
    assert!(openapi_schema().is_valid(&doc));
    gw.assert_no_panic();
}

#[tokio::test]
async fn the_document_can_be_turned_off() {
    let gw = Gateway::start(Routes::simulated(&["m1"]).server("openapi = false")).await;
    let http = gw.client();
    // Then it is a path like any unknown one: behind the key, and not there.
    assert_error(
        &http.get_bare("/openapi.json").await,
        401,
        "missing_api_key",
        None,
    );
    assert_error(
        &http.get("/openapi.json", DEMO).await,
        404,
        "not_found",
        None,
    );
    // The model lists stay.
    assert_eq!(ids(&http.get(MC_MODELS, DEMO).await.json()), ["m1"]);
    gw.assert_no_panic();
}

#[tokio::test]
async fn the_commands_print_what_the_gateway_serves() {
    let gw = Gateway::start(shipped_routes()).await;
    let served = served_document(&gw.client()).await;
    let printed: Value = serde_json::from_str(&operator(gw.dir(), &["openapi"])).unwrap();
    assert_eq!(printed, served);
    let file = gw.dir().path().join("api.json");
    assert_eq!(operator(gw.dir(), &["openapi", file.to_str().unwrap()]), "");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written, served);

    let models: Value = serde_json::from_str(&operator(gw.dir(), &["models"])).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(ids(&models).len(), 44);

    // A broken routes file prints its problems, as `check` does, and nothing else.
    let broken =
        ConfigDir::new(shipped_routes().replace("schema = \"alpha\"", "schema = \"nope\""));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mediagate"))
        .arg("--config")
        .arg(broken.routes_path())
        .arg("openapi")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no schema named `nope`"), "{err}");
    gw.assert_no_panic();
}

const BEGIN: &str =
    "<!-- BEGIN parameter tables: generated by `mediagate models --markdown` from routes.toml -->";
const END: &str = "<!-- END parameter tables -->";

#[test]
fn the_parameter_tables_of_the_api_guide_match_the_shipped_routes() {
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/api.md")).unwrap();
    let (_, rest) = guide
        .split_once(BEGIN)
        .expect("the begin marker in docs/api.md");
    let (tables, _) = rest.split_once(END).expect("the end marker in docs/api.md");
    let dir = ConfigDir::new(shipped_routes_file());
    let generated = operator(&dir, &["models", "--markdown"]);
    assert!(
        generated.contains("| `seconds` | integer | no | one of `10`, `15` |"),
        "{generated}"
    );
    assert!(
        tables.trim() == generated.trim(),
        "docs/api.md's parameter tables differ from routes.toml; regenerate them with \
         `cargo run -- models --markdown` and paste the output between the markers"
    );
}
