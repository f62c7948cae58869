//! The OpenAPI 3.1 document of the client API, generated from a configuration
//! snapshot: every endpoint, the Bearer scheme, every refusal of the error catalogue
//! with its status and headers, and each endpoint's submit body as a `oneOf` over its
//! models (told apart by `model`), each with its own parameter schema. Served at
//! `/openapi.json` (built once per snapshot, so a reload shows at once) and printed by
//! `mediagate openapi`. [`markdown`] renders the same schemas as the parameter tables
//! of docs/api.md.

mod markdown;
mod objects;
mod responses;
mod schemas;
mod videos;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;
use serde_json::{Value, json};

pub use self::markdown::markdown;
use self::objects::{
    Components, Document, Info, Link, Operation, Parameter, PathItem, RequestBody, Response,
    SecurityScheme, Tag, json_content,
};
use self::responses::{
    ANY, AUTHENTICATED, CONTENT, DELETE, LIST, MODEL, QUERY, READY, SUBMIT, UPSTREAM, refusals,
    success,
};
use self::schemas::{SubmitBodies, reference};
use crate::config::Endpoint;
use crate::models::Model;
use crate::snapshot::Snapshot;

/// The document for `snapshot`.
pub fn document(snapshot: &Snapshot) -> Value {
    let models = sorted_models(snapshot);
    let mut schemas = schemas::answers();
    let bodies = SubmitBodies::name(&models, &mut schemas);
    let mut paths = BTreeMap::new();
    schemas.extend(videos::answers().map(|(name, s)| (name.to_string(), s)));
    for endpoint in Endpoint::ALL {
        let ops = Ops::of(endpoint);
        paths.insert(endpoint.models_path().into(), get(ops.list_models()));
        let model = format!("{}/{{id}}", endpoint.models_path());
        paths.insert(model, get(ops.model()));
        paths.insert(endpoint.usage_path().into(), get(ops.usage()));
        if endpoint == Endpoint::OpenAiVideos {
            videos::paths(&mut paths, &ops, &models);
            continue;
        }
        paths.insert(
            endpoint.path().to_string(),
            PathItem {
                get: Some(ops.list_tasks()),
                post: Some(ops.submit(bodies.body(&models, endpoint))),
                delete: None,
            },
        );
        let task = PathItem {
            delete: Some(ops.delete()),
            ..get(ops.query())
        };
        paths.insert(format!("{}/{{id}}", endpoint.path()), task);
        let content = format!("{}/{{id}}/content", endpoint.path());
        paths.insert(content, get(ops.content(false)));
        let nth = format!("{}/{{id}}/content/{{n}}", endpoint.path());
        paths.insert(nth, get(ops.content(true)));
    }
    operational(&mut paths, snapshot.metrics_on_main_listeners());
    let document = Document {
        openapi: "3.1.0",
        info: Info {
            title: "mediagate",
            version: env!("CARGO_PKG_VERSION"),
            description: "Asynchronous media generation: submit a task, store its `id`, query it until it is `completed` or `failed`. Every refusal is `{\"error\":{\"message\",\"type\",\"code\",\"param\"}}`; branch on `code`.",
        },
        tags: TAGS
            .iter()
            .map(|&(name, description)| Tag { name, description })
            .collect(),
        paths,
        components: Components {
            schemas,
            responses: responses::unlisted(),
            headers: responses::shared_headers(),
            security_schemes: BTreeMap::from([(
                "bearer",
                SecurityScheme {
                    kind: "http",
                    scheme: "bearer",
                    description: "`Authorization: Bearer <API_KEY>`.",
                },
            )]),
        },
        security: vec![BTreeMap::from([("bearer", [])])],
    };
    // Our own types always serialise.
    serde_json::to_value(document).unwrap_or_default()
}

/// Every model with the JSON Schema of its submit body, in the shape of a model list.
pub fn models(snapshot: &Snapshot) -> Value {
    let models = sorted_models(snapshot);
    let currency = &snapshot.billing.currency;
    let list = crate::api::shapes::ModelList::of(&models, currency, Endpoint::ModelCenter);
    serde_json::to_value(list).unwrap_or_default()
}

/// The document of the snapshot last asked for, as JSON text. A reload makes a new
/// snapshot, and the next request builds the document again.
#[derive(Default)]
pub struct Cache(Mutex<Option<(Weak<Snapshot>, Bytes)>>);

impl Cache {
    pub fn get(&self, snapshot: &Arc<Snapshot>) -> Bytes {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // The weak reference keeps the old snapshot's address from being reused.
        match &*slot {
            Some((of, text)) if of.as_ptr() == Arc::as_ptr(snapshot) => text.clone(),
            _ => {
                let text = Bytes::from(document(snapshot).to_string());
                *slot = Some((Arc::downgrade(snapshot), text.clone()));
                text
            }
        }
    }
}

/// Every model, by id.
fn sorted_models(snapshot: &Snapshot) -> Vec<&Model> {
    let mut models: Vec<&Model> = snapshot.models.values().map(|m| &**m).collect();
    models.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    models
}

const TAGS: [(&str, &str); 4] = [
    (
        "model-center",
        "`/v2/model-center/…`: every published model.",
    ),
    ("alpha", "`/v1/alpha/…`: the alpha-family video endpoint."),
    (
        "openai",
        "`/v1/videos`, `/v1/models`: the OpenAI Videos API's shapes, every video model.",
    ),
    (
        "operations",
        "Health, readiness and this document; no key needed.",
    ),
];

fn get(operation: Operation) -> PathItem {
    PathItem {
        get: Some(operation),
        post: None,
        delete: None,
    }
}

/// The operations of one endpoint, named after it.
struct Ops {
    endpoint: Endpoint,
    tag: &'static str,
    /// `ModelCenterTask`, `AlphaVideo`: operation ids are verbs on these.
    task: &'static str,
    tasks: &'static str,
    model: &'static str,
    models: &'static str,
}

impl Ops {
    fn of(endpoint: Endpoint) -> Self {
        match endpoint {
            Endpoint::ModelCenter => Self {
                endpoint,
                tag: "model-center",
                task: "ModelCenterTask",
                tasks: "ModelCenterTasks",
                model: "ModelCenterModel",
                models: "ModelCenterModels",
            },
            Endpoint::AlphaVideos => Self {
                endpoint,
                tag: "alpha",
                task: "AlphaVideo",
                tasks: "AlphaVideos",
                model: "AlphaModel",
                models: "AlphaModels",
            },
            Endpoint::OpenAiVideos => Self {
                endpoint,
                tag: "openai",
                task: "Video",
                tasks: "Videos",
                model: "OpenAiModel",
                models: "OpenAiModels",
            },
        }
    }

    /// An authenticated operation answering `ok` or one of the refusals `codes`.
    fn operation(
        &self,
        id: String,
        summary: String,
        ok: (&str, Value),
        codes: &[&[&str]],
    ) -> Operation {
        let mut responses = refusals(&[codes, &[AUTHENTICATED]].concat(), true);
        responses.insert("200".into(), success(ok.0, ok.1, true));
        Operation {
            operation_id: id,
            summary,
            description: None,
            tags: [self.tag],
            parameters: Vec::new(),
            request_body: None,
            responses,
            security: None,
        }
    }

    fn submit(&self, body: Value) -> Operation {
        let path = self.endpoint.path();
        let mut op = self.operation(
            format!("submit{}", self.task),
            format!("Submit a task to {path}"),
            (
                "The task was created: store its `id`.",
                reference("Submitted"),
            ),
            &[SUBMIT, UPSTREAM],
        );
        op.description = Some(
            "The body is `model` and that model's parameters: one schema per model, told apart by `model`. A retry with the same `Idempotency-Key` returns the first answer (`Idempotent-Replayed: true`) instead of creating a second task.".into(),
        );
        op.parameters.push(Parameter {
            name: "Idempotency-Key",
            location: "header",
            required: false,
            description: "Your key for this submit, to retry it safely: 1 to 255 visible ASCII characters, bare or as a quoted string.",
            schema: json!({"type": "string", "pattern": IDEMPOTENCY_KEY}),
        });
        op.request_body = Some(RequestBody {
            required: true,
            content: json_content(body),
        });
        let ok = op.responses.get_mut("200").expect("inserted above");
        ok.headers.insert(
            "Idempotent-Replayed",
            objects::Header::Inline {
                description: "`true` when this is the first answer to this `Idempotency-Key`, given again.",
                required: false,
                schema: json!({"const": "true"}),
            },
        );
        ok.links = self.task_links();
        op
    }

    /// From a created task to its query and content (what a client does next).
    fn task_links(&self) -> BTreeMap<&'static str, Link> {
        let link = |op: String, description| Link {
            operation_id: op,
            parameters: BTreeMap::from([("id", "$response.body#/id")]),
            description,
        };
        BTreeMap::from([
            (
                "query",
                link(format!("get{}", self.task), "Query the task."),
            ),
            (
                "content",
                link(
                    format!("get{}Content", self.task),
                    "Its result, once completed.",
                ),
            ),
        ])
    }

    fn list_tasks(&self) -> Operation {
        let path = self.endpoint.path();
        let mut op = self.operation(
            format!("list{}", self.tasks),
            format!("List your tasks of {path}, newest first"),
            ("A page of your tasks.", reference("TaskList")),
            &[LIST],
        );
        op.parameters = vec![
            Parameter {
                name: "limit",
                location: "query",
                required: false,
                description: "Tasks per page.",
                schema: json!({"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
            },
            Parameter {
                name: "after",
                location: "query",
                required: false,
                description: "The `last_id` of the previous page; another value is refused (400).",
                schema: json!({"type": "string"}),
            },
        ];
        op
    }

    fn delete(&self) -> Operation {
        let deleted = json!({
            "type": "object",
            "required": ["id", "object", "deleted"],
            "properties": {
                "id": {"type": "string"},
                "object": {"type": "string", "enum": ["video", "image"]},
                "deleted": {"const": true},
            },
        });
        let mut op = self.operation(
            format!("delete{}", self.task),
            "Delete a task (cancelling it first when unfinished)".into(),
            ("The task is deleted (also when it already was).", deleted),
            &[DELETE, UPSTREAM],
        );
        op.parameters
            .push(id_parameter("The task id the submit returned."));
        op.description = Some(
            "An unfinished task is first cancelled at its provider (it ends `failed`, code `canceled`); 409 `not_cancelable` when its provider cannot cancel. Its stored results are removed and it leaves listings.".into(),
        );
        op
    }

    fn query(&self) -> Operation {
        let mut op = self.operation(
            format!("get{}", self.task),
            "Query a task".into(),
            (
                "The task's status and, once completed, its results.",
                reference("Task"),
            ),
            &[QUERY, UPSTREAM],
        );
        op.parameters
            .push(id_parameter("The task id the submit returned."));
        op.description = Some(
            "Long-poll: with `wait` (or `Prefer: wait=N`) the answer comes as soon as the task's status differs from `status` (by default the current one), or when the wait is over, with the state then. A finished task answers at once.".into(),
        );
        op.parameters.extend([
            Parameter {
                name: "wait",
                location: "query",
                required: false,
                description: "Seconds to wait for a change of status (long-poll).",
                schema: json!({"type": "integer", "minimum": 0, "maximum": 60}),
            },
            Parameter {
                name: "status",
                location: "query",
                required: false,
                description: "The status you last saw: a wait ends when the task's status differs from it.",
                schema: json!({"type": "string", "enum": ["queued", "processing", "completed", "failed"]}),
            },
            Parameter {
                name: "Prefer",
                location: "header",
                required: false,
                description: "`wait=N` (RFC 7240): the same as `?wait=N` (at most 60); answered with `Preference-Applied`.",
                schema: json!({"type": "string"}),
            },
        ]);
        let ok = op.responses.get_mut("200").expect("inserted");
        ok.headers.insert(
            "Preference-Applied",
            objects::Header::Inline {
                description: "`wait=N` when a `Prefer: wait` was honoured.",
                required: false,
                schema: json!({"type": "string", "pattern": "^wait=[0-9]+$"}),
            },
        );
        op
    }

    /// `…/content`, or with `nth` `…/content/{n}`.
    fn content(&self, nth: bool) -> Operation {
        let (id, summary) = if nth {
            (
                format!("get{}ContentN", self.task),
                "Download result `n` of a task (0 for the first)",
            )
        } else {
            (
                format!("get{}Content", self.task),
                "Download a task's (first) result",
            )
        };
        let mut op = self.operation(
            id,
            summary.into(),
            ("The result.", json!({})),
            &[CONTENT, UPSTREAM],
        );
        op.parameters
            .push(id_parameter("The task id the submit returned."));
        if nth {
            op.parameters.push(Parameter {
                name: "n",
                location: "path",
                required: true,
                description: "Which result, from 0.",
                schema: json!({"type": "string", "pattern": "^[0-9]{1,3}$"}),
            });
        }
        op.parameters.push(Parameter {
            name: "Range",
            location: "header",
            required: false,
            description: "A byte range (one).",
            schema: json!({"type": "string"}),
        });
        // The key, or a signed link's `expires` and `signature` instead of it.
        op.security = Some(vec![BTreeMap::from([("bearer", [])]), BTreeMap::new()]);
        for (name, description) in [
            (
                "expires",
                "A signed link's expiry (Unix seconds), as the task's links carry it: with `signature`, no key is needed.",
            ),
            (
                "signature",
                "A signed link's signature, as the task's links carry it.",
            ),
        ] {
            op.parameters.push(Parameter {
                name,
                location: "query",
                required: false,
                description,
                schema: json!({"type": "string"}),
            });
        }
        // The bytes as the provider sends them, whole (200) or the range asked (206).
        let mut partial = success("The range asked for.", json!({}), true);
        let bytes = BTreeMap::from([("*/*", objects::MediaType { schema: json!({}) })]);
        partial.content = Some(bytes.clone());
        let ok = op.responses.get_mut("200").expect("inserted");
        ok.content = Some(bytes);
        op.responses.insert("206".into(), partial);
        add_bodiless_content_answers(&mut op);
        op
    }

    fn list_models(&self) -> Operation {
        let path = self.endpoint.path();
        let mut op = self.operation(
            format!("list{}", self.models),
            format!("List the models your key may submit to {path}"),
            (
                "Every such model, by id, in one page.",
                reference("ModelList"),
            ),
            &[],
        );
        let ok = op.responses.get_mut("200").expect("inserted");
        ok.links = BTreeMap::from([(
            "first",
            Link {
                operation_id: format!("get{}", self.model),
                parameters: BTreeMap::from([("id", "$response.body#/first_id")]),
                description: "The first model listed.",
            },
        )]);
        op
    }

    fn usage(&self) -> Operation {
        let mut op = self.operation(
            format!("get{}Usage", self.tag_name()),
            "Your key's tasks, video seconds and spend, per UTC day and model".into(),
            (
                "The key's usage over the range, its totals, and what remains of its budgets.",
                reference("Usage"),
            ),
            &[LIST],
        );
        for (name, description) in [
            (
                "from",
                "The first UTC day (YYYY-MM-DD); this month's first by default.",
            ),
            (
                "to",
                "The last UTC day, included; by default today (or `from`, when later). A range that ends before it starts has nothing in it.",
            ),
        ] {
            op.parameters.push(Parameter {
                name,
                location: "query",
                required: false,
                description,
                schema: json!({"type": "string", "format": "date"}),
            });
        }
        op
    }

    /// `ModelCenter`, `Alpha`: the part of an operation id naming the endpoint.
    fn tag_name(&self) -> &'static str {
        match self.endpoint {
            Endpoint::ModelCenter => "ModelCenter",
            Endpoint::AlphaVideos => "Alpha",
            Endpoint::OpenAiVideos => "OpenAi",
        }
    }

    fn model(&self) -> Operation {
        let mut op = self.operation(
            format!("get{}", self.model),
            "One model your key may submit here".into(),
            (
                "The model and the JSON Schema of its submit body.",
                reference("Model"),
            ),
            &[MODEL],
        );
        op.parameters.push(id_parameter(
            "The model id, percent-encoded (spaces and non-ASCII characters included).",
        ));
        op
    }
}

/// `Idempotency-Key` as the gateway reads it: 1 to 255 visible ASCII characters,
/// bare, or quoted (`"…"`, the quotes not counted); `""` is empty.
const IDEMPOTENCY_KEY: &str = r#"^(?:[!-~]|[!#-~][!-~]|"[!#-~]|[!-~]{3,255}|"[!-~]{254,255}")$"#;

fn id_parameter(description: &'static str) -> Parameter {
    Parameter {
        name: "id",
        location: "path",
        required: true,
        description,
        schema: json!({"type": "string", "minLength": 1}),
    }
}

/// Health, readiness, this document and (when served here) the metrics: no key.
fn operational(paths: &mut BTreeMap<String, PathItem>, metrics_here: bool) {
    let public = |id: &str, summary: &str, ok: Response, codes: &[&str]| {
        let mut responses = refusals(&[codes], false);
        responses.insert("200".into(), ok);
        get(Operation {
            operation_id: id.into(),
            summary: summary.into(),
            description: None,
            tags: ["operations"],
            parameters: Vec::new(),
            request_body: None,
            responses,
            security: Some(Vec::new()),
        })
    };
    let ok = |what, schema| success(what, schema, false);
    let health = ok("The process is up.", reference("Health"));
    paths.insert(
        "/healthz".into(),
        public("getHealth", "Liveness", health, ANY),
    );
    let ready = ok("Ready for traffic.", reference("Ready"));
    paths.insert(
        "/readyz".into(),
        public("getReady", "Readiness", ready, READY),
    );
    let document = ok("This document.", json!({"type": "object"}));
    let summary = "The OpenAPI document of this API";
    paths.insert(
        "/openapi.json".into(),
        public("getOpenApi", summary, document, ANY),
    );
    if metrics_here {
        let mut metrics = ok("Prometheus metrics.", json!({}));
        let text = BTreeMap::from([(
            "application/openmetrics-text",
            objects::MediaType {
                schema: json!({"type": "string"}),
            },
        )]);
        metrics.content = Some(text);
        paths.insert(
            "/metrics".into(),
            // Its own bearer token (`server.metrics_token_*`), not a client key.
            public(
                "getMetrics",
                "Metrics",
                metrics,
                &["missing_api_key", "invalid_api_key"],
            ),
        );
    }
}

/// The content route's answers without a body: a stored result's to a conditional
/// request, and the redirect of S3's direct links (416 is among the errors).
fn add_bodiless_content_answers(op: &mut Operation) {
    for (status, description) in [
        (
            "302",
            "A stored result in S3 with direct links on: `Location` is a URL of the object, presigned.",
        ),
        (
            "304",
            "A stored result the client has already (`If-None-Match` matches its `ETag`).",
        ),
    ] {
        let mut bare = success(description, json!({}), true);
        bare.content = None;
        op.responses.insert(status.into(), bare);
    }
}
