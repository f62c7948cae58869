//! The limits of spec §8 (and the alpha request fields of §2), each accepted at its
//! edge and refused just past it: 400, the field named in `error.param`, and a message
//! that says what is allowed.

use serde_json::{Value, json};

use crate::support::{ALPHA, DEMO, Gateway, Http, MODEL_CENTER, assert_error, shipped_routes};

const ALPHA_OPEN: [&str; 3] = ["alphaOpen2", "alphaOpen2Stable", "alphaOpen2Plus"];
const GAMMA_1_5: [&str; 3] = [
    "gamma_1_5_pro_480p",
    "gamma_1_5_pro_720p",
    "gamma_1_5_pro_1080p",
];
const DELTA: [&str; 2] = ["deltaq3-pro", "deltaq3-turbo"];

/// An alpha request that is valid apart from `set`.
fn alpha(model: &str, seconds: u64, set: Value) -> Value {
    let mut body = json!({
        "model": model,
        "prompt": "a kite over the sea",
        "aspect_ratio": "16:9",
        "seconds": seconds,
    });
    merge(&mut body, set);
    body
}

/// A model-center request that is valid apart from `set`.
fn center(model: &str, set: Value) -> Value {
    let mut body = json!({"model": model, "prompt": "a kite over the sea"});
    merge(&mut body, set);
    body
}

/// Set (or, with `null`, remove) members of `body`.
fn merge(body: &mut Value, set: Value) {
    let body = body.as_object_mut().expect("object");
    for (k, v) in set.as_object().expect("object").clone() {
        if v.is_null() {
            body.remove(&k);
        } else {
            body.insert(k, v);
        }
    }
}

async fn accepts(http: &Http, collection: &str, body: Value) {
    let r = http.post_json(collection, DEMO, &body).await;
    assert_eq!(r.status, 200, "{body} is within the limits: {}", r.text());
    assert!(r.json()["id"].is_string(), "{body}");
}

/// Refused with 400 `code`, naming `param`; the message names the parameter and
/// mentions every one of `allowed`.
async fn refuses(
    http: &Http,
    collection: &str,
    body: Value,
    code: &str,
    param: &str,
    allowed: &[&str],
) {
    let r = http.post_json(collection, DEMO, &body).await;
    let message = assert_error(&r, 400, code, Some(param));
    assert!(
        message.contains(param),
        "{body}: the message names `{param}`: {message}"
    );
    for a in allowed {
        assert!(
            message.contains(a),
            "{body}: the message says what is allowed ({a}): {message}"
        );
    }
}

#[tokio::test]
async fn limits_of_section_8() {
    let gw = Gateway::start(&shipped_routes()).await;
    let h = &gw.client();
    const BAD: &str = "invalid_parameter";
    const FORBIDDEN: &str = "unknown_parameter";

    // alpha2Stable: seconds is 10 or 15.
    for s in [10, 15] {
        accepts(h, ALPHA, alpha("alpha2Stable", s, json!({}))).await;
    }
    for s in [4, 12, 16] {
        let body = alpha("alpha2Stable", s, json!({}));
        refuses(h, ALPHA, body, BAD, "seconds", &["10", "15"]).await;
    }

    // alphaOpen2*: seconds is 4, 8 or 12.
    for model in ALPHA_OPEN {
        for s in [4, 8, 12] {
            accepts(h, ALPHA, alpha(model, s, json!({}))).await;
        }
        for s in [5, 10, 16] {
            let body = alpha(model, s, json!({}));
            refuses(h, ALPHA, body, BAD, "seconds", &["4", "8", "12"]).await;
        }
    }

    // gamma 1.5: duration 5-10.
    for model in GAMMA_1_5 {
        for d in [5, 10] {
            accepts(h, MODEL_CENTER, center(model, json!({"duration": d}))).await;
        }
        let body = center(model, json!({"duration": 4}));
        refuses(h, MODEL_CENTER, body, BAD, "duration", &["5"]).await;
        let body = center(model, json!({"duration": 11}));
        refuses(h, MODEL_CENTER, body, BAD, "duration", &["10"]).await;
        let body = center(model, json!({"duration": "5"}));
        refuses(h, MODEL_CENTER, body, BAD, "duration", &["integer"]).await;
    }

    // delta: duration 1-16; resolution 540p, 720p, 1080p.
    for model in DELTA {
        for d in [1, 16] {
            accepts(h, MODEL_CENTER, center(model, json!({"duration": d}))).await;
        }
        let body = center(model, json!({"duration": 0}));
        refuses(h, MODEL_CENTER, body, BAD, "duration", &["1"]).await;
        let body = center(model, json!({"duration": 17}));
        refuses(h, MODEL_CENTER, body, BAD, "duration", &["16"]).await;
        for res in ["540p", "720p", "1080p"] {
            accepts(h, MODEL_CENTER, center(model, json!({"resolution": res}))).await;
        }
        for res in ["360p", "480p", "4k", ""] {
            let body = center(model, json!({"resolution": res}));
            let allowed = ["540p", "720p", "1080p"];
            refuses(h, MODEL_CENTER, body, BAD, "resolution", &allowed).await;
        }
    }

    // epsilon_video3: duration 6-30; resolution 480p or 720p; at most 7 reference images.
    let m = "epsilon_video3";
    for d in [6, 30] {
        accepts(h, MODEL_CENTER, center(m, json!({"duration": d}))).await;
    }
    let body = center(m, json!({"duration": 5}));
    refuses(h, MODEL_CENTER, body, BAD, "duration", &["6"]).await;
    let body = center(m, json!({"duration": 31}));
    refuses(h, MODEL_CENTER, body, BAD, "duration", &["30"]).await;
    for res in ["480p", "720p"] {
        accepts(h, MODEL_CENTER, center(m, json!({"resolution": res}))).await;
    }
    for res in ["1080p", "540p"] {
        let body = center(m, json!({"resolution": res}));
        refuses(h, MODEL_CENTER, body, BAD, "resolution", &["480p", "720p"]).await;
    }
    let images = |n: usize| -> Vec<String> {
        (0..n)
            .map(|i| format!("https://example.com/ref-{i}.png"))
            .collect()
    };
    for n in [1, 7] {
        let body = center(m, json!({"reference_images": images(n)}));
        accepts(h, MODEL_CENTER, body).await;
    }
    let body = center(m, json!({"reference_images": images(8)}));
    refuses(h, MODEL_CENTER, body, BAD, "reference_images", &["7"]).await;

    // epsilon_video3_pro: duration only 10; resolution cannot be specified.
    let m = "epsilon_video3_pro";
    accepts(h, MODEL_CENTER, center(m, json!({"duration": 10}))).await;
    accepts(h, MODEL_CENTER, center(m, json!({}))).await;
    for d in [9, 11] {
        let body = center(m, json!({"duration": d}));
        refuses(h, MODEL_CENTER, body, BAD, "duration", &["10"]).await;
    }
    for res in ["480p", "720p", "1080p"] {
        let body = center(m, json!({"resolution": res}));
        refuses(h, MODEL_CENTER, body, FORBIDDEN, "resolution", &[]).await;
    }
}

#[tokio::test]
async fn alpha_request_fields_and_unknown_parameters() {
    let gw = Gateway::start(&shipped_routes()).await;
    let h = &gw.client();
    const BAD: &str = "invalid_parameter";
    let m = "alpha2Stable";

    // prompt: required, non-empty.
    accepts(h, ALPHA, alpha(m, 10, json!({"prompt": "x"}))).await;
    let body = alpha(m, 10, json!({"prompt": ""}));
    refuses(h, ALPHA, body, BAD, "prompt", &[]).await;
    let body = alpha(m, 10, json!({"prompt": null}));
    refuses(h, ALPHA, body, BAD, "prompt", &["required"]).await;
    let body = alpha(m, 10, json!({"prompt": 42}));
    refuses(h, ALPHA, body, BAD, "prompt", &["string"]).await;

    // aspect_ratio: `<width>:<height>`, positive integers.
    for ratio in ["16:9", "9:16", "1:1", "21:9"] {
        accepts(h, ALPHA, alpha(m, 10, json!({"aspect_ratio": ratio}))).await;
    }
    for ratio in [
        "16x9", "0:9", "16:0", "16:9:1", ":9", "16:", "", "-16:9", "1.5:1",
    ] {
        let body = alpha(m, 10, json!({"aspect_ratio": ratio}));
        refuses(h, ALPHA, body, BAD, "aspect_ratio", &[]).await;
    }

    // seconds: an integer, not a string or a fraction.
    for seconds in [json!("10"), json!(10.5), json!(true), json!([10])] {
        let body = alpha(m, 10, json!({"seconds": seconds}));
        refuses(h, ALPHA, body, BAD, "seconds", &["integer"]).await;
    }

    // Unknown parameters are refused, naming the parameter and listing the allowed
    // ones. `duration` is a model-center name, not an alpha one.
    let r = h
        .post_json(ALPHA, DEMO, &alpha(m, 10, json!({"duration": 10})))
        .await;
    let message = assert_error(&r, 400, "unknown_parameter", Some("duration"));
    for allowed in ["prompt", "aspect_ratio", "seconds"] {
        assert!(message.contains(allowed), "{message}");
    }
    let r = h
        .post_json(
            MODEL_CENTER,
            DEMO,
            &center("sd_2.0_special", json!({"colour": "red"})),
        )
        .await;
    let message = assert_error(&r, 400, "unknown_parameter", Some("colour"));
    for allowed in ["prompt", "duration", "resolution"] {
        assert!(message.contains(allowed), "{message}");
    }
    // An image model does not take video parameters.
    let r = h
        .post_json(
            MODEL_CENTER,
            DEMO,
            &center("zeta-5.0", json!({"duration": 5})),
        )
        .await;
    assert_error(&r, 400, "unknown_parameter", Some("duration"));
}
