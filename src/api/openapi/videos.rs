//! `/v1/videos` in the document: the OpenAI Videos API's operations, request bodies
//! and answers (the models are listed at `/v1/models` by the generic operations).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::objects::{MediaType, Operation, Parameter, PathItem, RequestBody, json_content};
use super::responses::{
    CONTENT, DELETE, LIST, QUERY, REMIX, SUBMIT, UPSTREAM, VARIANT, VIDEO_SUBMIT, refusals,
};
use super::schemas::reference;
use super::{Ops, get, id_parameter};
use crate::api::routing::INPUTS;
use crate::config::Endpoint;
use crate::models::Model;

const INPUT: &[&str] = &[
    "invalid_signature",
    "link_expired",
    "result_expired",
    "range_not_satisfiable",
    "storage_unavailable",
    "not_found",
];

/// Every path of `/v1/videos`.
pub(super) fn paths(paths: &mut BTreeMap<String, PathItem>, ops: &Ops, models: &[&Model]) {
    let base = Endpoint::OpenAiVideos.path();
    let ids: Vec<&str> = models
        .iter()
        .filter(|m| m.served_on(Endpoint::OpenAiVideos))
        .map(|m| m.id.as_str())
        .collect();
    paths.insert(
        base.into(),
        PathItem {
            get: Some(list(ops)),
            post: Some(create(ops, &ids)),
            delete: None,
        },
    );
    let one = PathItem {
        delete: Some(delete(ops)),
        ..get(retrieve(ops))
    };
    paths.insert(format!("{base}/{{id}}"), one);
    paths.insert(format!("{base}/{{id}}/content"), get(content(ops)));
    let remix = PathItem {
        post: Some(remix(ops)),
        ..PathItem::default()
    };
    paths.insert(format!("{base}/{{id}}/remix"), remix);
    paths.insert(format!("{INPUTS}{{name}}"), get(input(ops)));
}

/// The request's fields, for JSON and for the form alike; `model` one of `ids`.
fn create_fields(form: bool, ids: &[&str]) -> Value {
    let model = match ids {
        [] => json!({"type": "string"}),
        ids => json!({"type": "string", "enum": ids}),
    };
    let input = if form {
        json!({"type": "string", "contentMediaType": "application/octet-stream",
               "description": "An image (or video) file: kept by the gateway and handed to the provider as a signed link."})
    } else {
        json!({"type": "string", "maxLength": 32768, "pattern": "^(https?://|data:)",
               "description": "A URL of an image the provider can fetch."})
    };
    json!({
        "type": "object",
        "required": ["model", "prompt"],
        "additionalProperties": false,
        "properties": {
            "model": model,
            "prompt": {"type": "string", "minLength": 1},
            "seconds": {"type": "string", "pattern": "^[0-9]{1,6}$",
                        "description": "Seconds of video, as a string; the model's `duration` (or `seconds`)."},
            "size": {"type": "string", "pattern": "^[0-9]{1,5}x[0-9]{1,5}$",
                     "description": "WIDTHxHEIGHT; the model's `aspect_ratio` and `resolution`."},
            "input_reference": input,
        },
    })
}

fn create(ops: &Ops, ids: &[&str]) -> Operation {
    let mut op = ops.operation(
        "createVideo".into(),
        "Create a video (OpenAI's `client.videos.create`)".into(),
        ("The video, queued.", reference("Video")),
        &[SUBMIT, VIDEO_SUBMIT, UPSTREAM],
    );
    let mut content = json_content(create_fields(false, ids));
    content.insert(
        "multipart/form-data",
        MediaType {
            schema: create_fields(true, ids),
        },
    );
    op.request_body = Some(RequestBody {
        required: true,
        content,
    });
    // `getVideo`, `getVideoContent`: the operation ids the generic links name.
    let ok = op.responses.get_mut("200").expect("inserted");
    ok.links = ops.task_links();
    op
}

fn list(ops: &Ops) -> Operation {
    let mut op = ops.operation(
        "listVideos".into(),
        "List your videos of /v1/videos".into(),
        ("A page of your videos.", reference("VideoList")),
        &[LIST],
    );
    let param = |name, description, schema| Parameter {
        name,
        location: "query",
        required: false,
        description,
        schema,
    };
    op.parameters = vec![
        param(
            "limit",
            "Videos per page.",
            json!({"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
        ),
        param(
            "after",
            "The `last_id` of the previous page.",
            json!({"type": "string"}),
        ),
        param(
            "order",
            "`desc` (newest first, the default) or `asc`.",
            json!({"type": "string", "enum": ["asc", "desc"]}),
        ),
    ];
    op
}

fn retrieve(ops: &Ops) -> Operation {
    let mut op = ops.operation(
        "getVideo".into(),
        "Retrieve a video".into(),
        ("The video.", reference("Video")),
        &[QUERY, UPSTREAM],
    );
    op.parameters.push(id_parameter("The video's id."));
    op
}

fn delete(ops: &Ops) -> Operation {
    let deleted = json!({
        "type": "object",
        "required": ["id", "object", "deleted"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "video.deleted"},
            "deleted": {"const": true},
        },
    });
    let mut op = ops.operation(
        "deleteVideo".into(),
        "Delete a video (cancelling it first when unfinished)".into(),
        ("The video is deleted (also when it already was).", deleted),
        &[DELETE, UPSTREAM],
    );
    op.parameters.push(id_parameter("The video's id."));
    op
}

fn content(ops: &Ops) -> Operation {
    let mut op = ops.content(false);
    op.operation_id = "getVideoContent".into();
    op.summary = "Download a video".into();
    op.parameters.push(Parameter {
        name: "variant",
        location: "query",
        required: false,
        description: "`video` (the default); `thumbnail` and `spritesheet` are 404: no provider gives them.",
        schema: json!({"type": "string", "enum": ["video", "thumbnail", "spritesheet"]}),
    });
    let codes = [CONTENT, UPSTREAM, VARIANT, super::responses::AUTHENTICATED];
    op.responses.extend(refusals(&codes, true));
    op
}

fn remix(ops: &Ops) -> Operation {
    let mut op = ops.operation(
        "remixVideo".into(),
        "Remix a video: not supported (400 `unsupported`)".into(),
        ("Never: remixing is not supported.", json!({})),
        &[QUERY, REMIX],
    );
    op.responses.remove("200");
    op.parameters.push(id_parameter("The video's id."));
    op
}

fn input(ops: &Ops) -> Operation {
    let mut op = ops.operation(
        "getVideoInput".into(),
        "An uploaded `input_reference`, by the signed link a provider was given".into(),
        ("The uploaded file.", json!({})),
        &[],
    );
    op.responses = refusals(&[INPUT], false);
    let mut ok = super::responses::success("The uploaded file.", json!({}), false);
    ok.content = Some(BTreeMap::from([("*/*", MediaType { schema: json!({}) })]));
    op.responses.insert("200".into(), ok);
    op.security = Some(Vec::new());
    op.parameters.push(Parameter {
        name: "name",
        location: "path",
        required: true,
        description: "The upload's name, as its link carries it.",
        schema: json!({"type": "string"}),
    });
    for name in ["expires", "signature"] {
        op.parameters.push(Parameter {
            name,
            location: "query",
            required: true,
            description: "As the link carries it.",
            schema: json!({"type": "string"}),
        });
    }
    op
}

/// The answers' schemas of `/v1/videos`, by component name.
pub(super) fn answers() -> [(&'static str, Value); 2] {
    let nullable_int = json!({"type": ["integer", "null"], "minimum": 0});
    let nullable_text = json!({"type": ["string", "null"]});
    let video = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["id", "object", "model", "status", "progress", "created_at", "completed_at",
                     "expires_at", "seconds", "size", "error", "remixed_from_video_id"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": "video"},
            "model": {"type": "string"},
            "status": {"type": "string", "enum": ["queued", "in_progress", "completed", "failed"]},
            "progress": {"type": "integer", "minimum": 0, "maximum": 100},
            "created_at": {"type": "integer", "minimum": 0},
            "completed_at": nullable_int,
            "expires_at": nullable_int,
            "seconds": nullable_text,
            "size": nullable_text,
            "error": {"anyOf": [{"type": "null"}, reference("TaskError")]},
            "remixed_from_video_id": {"type": "null"},
        },
    });
    [
        ("Video", video),
        ("VideoList", super::schemas::list("Video")),
    ]
}
