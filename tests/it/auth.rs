//! Bearer authentication (401), per-key model permissions (403), isolation of one
//! key's tasks from another's, and the operational routes that need no key.

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};

use crate::support::{ALPHA, DEMO, DEMO2, Gateway, MODEL_CENTER, assert_error, shipped_routes};

fn alpha_body(model: &str) -> Value {
    json!({"model": model, "prompt": "a cat", "aspect_ratio": "16:9", "seconds": 10})
}

#[tokio::test]
async fn missing_malformed_and_unknown_keys_are_401() {
    let gw = Gateway::start(&shipped_routes()).await;
    let http = gw.client();
    let sent = json!({"model": "zeta-5.0", "prompt": "a cat"});
    let center_id = http.submit_id(MODEL_CENTER, DEMO, &sent).await;
    let alpha_id = http
        .submit_id(ALPHA, DEMO, &alpha_body("alpha2Stable"))
        .await;

    let center_body = json!({"model": "zeta-5.0", "prompt": "a cat"}).to_string();
    let alpha_body = alpha_body("alpha2Stable").to_string();
    let requests = [
        (Method::POST, MODEL_CENTER.to_string(), center_body.clone()),
        (
            Method::GET,
            format!("{MODEL_CENTER}/{center_id}"),
            String::new(),
        ),
        (Method::POST, ALPHA.to_string(), alpha_body),
        (Method::GET, format!("{ALPHA}/{alpha_id}"), String::new()),
        // Unknown paths and wrong methods do not tell anything before the key is known.
        (Method::GET, "/v2/other".to_string(), String::new()),
        (Method::DELETE, MODEL_CENTER.to_string(), String::new()),
        // Nothing of the body is looked at before the key.
        (
            Method::POST,
            MODEL_CENTER.to_string(),
            "{not json".to_string(),
        ),
    ];
    let bad_keys: [(Option<&str>, &str); 11] = [
        (None, "missing_api_key"),
        (Some(""), "invalid_api_key"),
        (Some("sk-demo"), "invalid_api_key"),
        (Some("Basic sk-demo"), "invalid_api_key"),
        (Some("Token sk-demo"), "invalid_api_key"),
        (Some("Bearer"), "invalid_api_key"),
        (Some("Bearer "), "invalid_api_key"),
        (Some("Bearer sk-nope"), "invalid_api_key"),
        (Some("Bearer sk-demo-3"), "invalid_api_key"),
        (Some("Bearer sk-dem"), "invalid_api_key"),
        (Some("Bearer sk-demo sk-demo-2"), "invalid_api_key"),
    ];
    for (method, path, body) in &requests {
        for (auth, code) in bad_keys {
            let mut headers = vec![("content-type", "application/json")];
            if let Some(auth) = auth {
                headers.push(("authorization", auth));
            }
            let r = http
                .send(method.clone(), path, &headers, body.clone())
                .await;
            assert_error(&r, 401, code, None);
            assert_eq!(
                r.header("www-authenticate"),
                Some("Bearer"),
                "{method} {path} with {auth:?}"
            );
        }
    }

    // The scheme is case-insensitive; the key itself is not.
    let r = http
        .send(
            Method::GET,
            &format!("{MODEL_CENTER}/{center_id}"),
            &[("authorization", "bearer sk-demo")],
            Bytes::new(),
        )
        .await;
    assert_eq!(r.status, 200);
    let r = http
        .send(
            Method::GET,
            &format!("{MODEL_CENTER}/{center_id}"),
            &[("authorization", "Bearer SK-DEMO")],
            Bytes::new(),
        )
        .await;
    assert_error(&r, 401, "invalid_api_key", None);
}

#[tokio::test]
async fn a_restricted_key_uses_only_its_models() {
    let gw = Gateway::start(&shipped_routes()).await;
    let http = gw.client();

    // Every model sk-demo-2 is given in the shipped routes.toml.
    for model in [
        "zeta_5.0Pro",
        "zeta-5.0",
        "gamma_1_5_pro_480p",
        "gamma_1_5_pro_720p",
        "gamma_1_5_pro_1080p",
    ] {
        let sent = json!({"model": model, "prompt": "a cat"});
        http.submit(MODEL_CENTER, DEMO2, &sent).await;
    }
    for model in [
        "alpha2Stable",
        "alphaOpen2",
        "alphaOpen2Stable",
        "alphaOpen2Plus",
    ] {
        let seconds = if model == "alpha2Stable" { 10 } else { 8 };
        let sent =
            json!({"model": model, "prompt": "a cat", "aspect_ratio": "1:1", "seconds": seconds});
        http.submit(ALPHA, DEMO2, &sent).await;
    }

    // Any other model: 403 naming the model, whatever the parameters.
    for model in [
        "sd_2.0_special",
        "eta 1.0 文生视频",
        "kappa O3 视频生成",
        "deltaq3-pro",
        "epsilon_video3_pro",
        "gamma_2_0",
    ] {
        for body in [
            json!({"model": model, "prompt": "a cat"}),
            json!({"model": model}),
            json!({"model": model, "prompt": "a cat", "colour": "red"}),
        ] {
            let r = http.post_json(MODEL_CENTER, DEMO2, &body).await;
            let message = assert_error(&r, 403, "model_not_allowed", Some("model"));
            assert!(message.contains(model), "{message}");
        }
        // The unrestricted key may.
        let sent = json!({"model": model, "prompt": "a cat"});
        http.submit(MODEL_CENTER, DEMO, &sent).await;
    }
    // An unknown model is unknown (400), not forbidden, for either key.
    for key in [DEMO, DEMO2] {
        let sent = json!({"model": "nope", "prompt": "a cat"});
        let r = http.post_json(MODEL_CENTER, key, &sent).await;
        assert_error(&r, 400, "unknown_model", Some("model"));
    }
}

#[tokio::test]
async fn keys_see_only_their_own_tasks() {
    let gw = Gateway::start(&shipped_routes()).await;
    let http = gw.client();
    let image = json!({"model": "zeta-5.0", "prompt": "a cat"});
    let tasks = [
        (
            DEMO,
            MODEL_CENTER,
            http.submit_id(MODEL_CENTER, DEMO, &image).await,
        ),
        (
            DEMO2,
            MODEL_CENTER,
            http.submit_id(MODEL_CENTER, DEMO2, &image).await,
        ),
        (
            DEMO,
            ALPHA,
            http.submit_id(ALPHA, DEMO, &alpha_body("alpha2Stable"))
                .await,
        ),
        (
            DEMO2,
            ALPHA,
            http.submit_id(ALPHA, DEMO2, &alpha_body("alpha2Stable"))
                .await,
        ),
    ];
    let made_up = http
        .get(&format!("{MODEL_CENTER}/task_made_up"), DEMO)
        .await;
    assert_error(&made_up, 404, "task_not_found", Some("id"));

    for (owner, collection, id) in &tasks {
        let other = if *owner == DEMO { DEMO2 } else { DEMO };
        let path = format!("{collection}/{id}");
        let mine = http.wait_done(collection, owner, id).await;
        assert_eq!(mine["status"], "completed", "{owner} reads its own task");
        assert_eq!(mine["id"], id.as_str());
        let theirs = http.get(&path, other).await;
        assert_error(&theirs, 404, "task_not_found", Some("id"));
        assert_eq!(
            theirs.body, made_up.body,
            "{other} cannot tell {owner}'s task from a made-up id"
        );
    }
}

#[tokio::test]
async fn health_and_readiness_need_no_key() {
    let gw = Gateway::start(&shipped_routes()).await;
    let http = gw.client();
    for path in ["/healthz", "/readyz"] {
        for headers in [
            vec![],
            vec![("authorization", "Bearer sk-nope")],
            vec![("authorization", "garbage")],
        ] {
            let r = http.send(Method::GET, path, &headers, Bytes::new()).await;
            assert_eq!(r.status, 200, "{path} with {headers:?}");
            assert!(r.header("www-authenticate").is_none());
            assert!(r.json()["status"].is_string(), "{path}");
        }
    }
    // Only those two: a neighbour path still wants a key.
    let r = http
        .send(Method::GET, "/healthz/x", &[], Bytes::new())
        .await;
    assert_error(&r, 401, "missing_api_key", None);
}
