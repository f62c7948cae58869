//! `POST /v1/videos`: an OpenAI video request, JSON or `multipart/form-data` (what the
//! SDK sends with an `input_reference` file) → an uploaded file kept in storage and
//! handed on as a signed link → the model's parameters by its family's
//! `openai_request` → the task service's submit, as `POST {collection}` does → the
//! video object.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response, StatusCode, header};
use serde_json::Value;

use super::public_url::PublicBase;
use super::{callback, idempotency};
use crate::api::context::Ctx;
use crate::api::routing::INPUTS;
use crate::config::Endpoint;
use crate::edge::body::{is_json, read_body};
use crate::error::ApiError;
use crate::gateway::Gateway;
use crate::lifecycle::{SubmitOrder, Submitted};
use crate::models::OpenAiRequest;
use crate::response::{ResponseBody, json};
use crate::storage::Storage;
use crate::tasks::TaskState;
use crate::tasks::openai::VideoAsked;

/// A form's file part: its bytes and declared type.
struct Upload {
    bytes: Bytes,
    content_type: Option<String>,
}

/// The request as read: `model`, the OpenAI fields, and an uploaded file if any.
#[derive(Default)]
struct Asked {
    model: Option<String>,
    fields: OpenAiRequest,
    upload: Option<Upload>,
}

pub(super) async fn submit<B>(
    gateway: &Arc<Gateway>,
    ctx: &Ctx,
    req: Request<B>,
) -> Result<Response<ResponseBody>, ApiError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let key = ctx.key()?;
    let with_ledger = gateway.tasks.ledger().is_some();
    let idempotency_key = match with_ledger {
        true => idempotency::read(req.headers(), key)?,
        false => None,
    };
    let (parts, body) = req.into_parts();
    let bytes = read_body(&parts.headers, body, ctx.snapshot.server.max_body_bytes).await?;
    let mut asked = parse(&parts.headers, bytes).await?;
    let model_id = asked.model.take().ok_or_else(ApiError::missing_model)?;
    let endpoint = Endpoint::OpenAiVideos;
    let model = ctx
        .snapshot
        .model(&model_id, endpoint)
        .ok_or_else(|| ApiError::unknown_model(&model_id, endpoint.path()))?;
    ctx.note(|f| f.model = Some(model.id.clone()));
    if !key.may_use(&model.id) {
        return Err(ApiError::model_not_allowed(&model.id));
    }
    let mut uploaded = None;
    if let Some(upload) = asked.upload.take() {
        let input = Input::of(gateway, ctx, &parts, upload)?;
        asked.fields.input_reference = Some(input.link.clone());
        uploaded = Some(input);
    }
    let params = model.openai_params(&asked.fields)?;
    let openai = VideoAsked {
        seconds: asked.fields.seconds,
        size: asked.fields.size,
    };
    let same_request = same_request(&params, uploaded.as_ref(), &openai);
    let video_seconds = model.video_seconds(&params)?;
    let callback_url = match with_ledger {
        true => callback::target(ctx, key, None).await?,
        false => None,
    };
    // Written once the request is found valid: a refused one leaves nothing behind.
    if let Some(input) = uploaded {
        input.keep().await?;
    }
    let snapshot = ctx.snapshot.clone();
    let order = SubmitOrder {
        idempotency_key,
        callback_url,
        openai: Some(openai.clone()),
        same_request: Some(same_request),
        ..SubmitOrder::new(
            snapshot,
            key,
            endpoint,
            model.clone(),
            params,
            video_seconds,
        )
    };
    let (submitted, attempted) = gateway.tasks.submit(order).await;
    ctx.note(|f| {
        f.provider = attempted.provider;
        f.upstream = attempted.upstream_time;
    });
    Ok(match submitted? {
        Submitted::Created(created) => {
            let state = TaskState::of_status(created.status);
            json(StatusCode::OK, &created.video(&openai, &state))
        }
        Submitted::Replayed(answer) => idempotency::replay(&answer),
    })
}

/// What tells a retry of the request from another under the same `Idempotency-Key`:
/// the model's parameters (an upload named by its stored input), and the `seconds`
/// and `size` as sent, which the answer echoes though two sizes may map to one
/// parameter of the model.
fn same_request(params: &Value, input: Option<&Input>, asked: &VideoAsked) -> Value {
    let params = input.map_or_else(|| params.clone(), |input| input.same_request(params));
    serde_json::json!({"params": params, "seconds": asked.seconds, "size": asked.size})
}

/// The body as JSON or as a form.
async fn parse(headers: &http::HeaderMap, bytes: Bytes) -> Result<Asked, ApiError> {
    if is_json(headers) {
        return parse_json(&bytes);
    }
    let boundary = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|ct| multer::parse_boundary(ct).ok())
        .ok_or_else(ApiError::unsupported_form)?;
    parse_form(bytes, boundary).await
}

fn parse_json(bytes: &[u8]) -> Result<Asked, ApiError> {
    let object = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err(ApiError::not_an_object()),
        Err(e) => return Err(ApiError::invalid_json(e)),
    };
    let mut asked = Asked::default();
    for (name, value) in object {
        // A name /v1/videos does not take is refused as such, whatever its value.
        if !FIELDS.contains(&name.as_str()) {
            return Err(unknown_field(&name));
        }
        let text = match value {
            Value::Null => continue,
            Value::String(s) => s,
            // `seconds` as a number is taken as the SDK's string would be.
            Value::Number(n) if name == "seconds" => n.to_string(),
            _ if name == "model" => return Err(ApiError::missing_model()),
            _ => {
                let msg = format!("`{name}` must be a string");
                return Err(ApiError::invalid_parameter(name, msg));
            }
        };
        asked.set(&name, text)?;
    }
    Ok(asked)
}

async fn parse_form(bytes: Bytes, boundary: String) -> Result<Asked, ApiError> {
    let stream = futures_util::stream::once(async move { Ok::<_, std::io::Error>(bytes) });
    let mut form = multer::Multipart::new(stream, boundary);
    let mut asked = Asked::default();
    let bad = |e: multer::Error| ApiError::invalid_form(&e.to_string());
    while let Some(field) = form.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or_default().to_string();
        if name == "input_reference" && field.file_name().is_some() {
            let declared = field.content_type().map(|m| m.essence_str().to_string());
            let bytes = field.bytes().await.map_err(bad)?;
            // The SDKs send a file given as bytes, with no type of its own, as
            // `application/octet-stream`: its type is then read from its first bytes.
            let content_type = match declared.as_deref() {
                None | Some("application/octet-stream") => {
                    sniffed(&bytes).map(str::to_string).or(declared)
                }
                Some(_) => declared,
            };
            asked.upload = Some(Upload {
                bytes,
                content_type,
            });
            continue;
        }
        let text = field.text().await.map_err(bad)?;
        asked.set(&name, text)?;
    }
    Ok(asked)
}

/// The fields a request to /v1/videos may carry.
const FIELDS: [&str; 5] = ["model", "prompt", "seconds", "size", "input_reference"];

impl Asked {
    /// One field of the request; any other name is refused.
    fn set(&mut self, name: &str, value: String) -> Result<(), ApiError> {
        let f = &mut self.fields;
        let slot = match name {
            "model" => &mut self.model,
            "prompt" => &mut f.prompt,
            "seconds" => &mut f.seconds,
            "size" => &mut f.size,
            "input_reference" => &mut f.input_reference,
            other => return Err(unknown_field(other)),
        };
        *slot = Some(value);
        Ok(())
    }
}

fn unknown_field(name: &str) -> ApiError {
    let msg = format!(
        "unknown field `{}`: /v1/videos takes model, prompt, seconds, size and input_reference",
        crate::error::quote(name)
    );
    ApiError::unknown_parameter(name.to_string(), msg)
}

/// The types an uploaded `input_reference` may have, with the extension it is kept
/// under (which says its type when it is served).
pub(super) const INPUT_TYPES: [(&str, &str); 4] = [
    ("image/jpeg", "jpg"),
    ("image/png", "png"),
    ("image/webp", "webp"),
    ("video/mp4", "mp4"),
];

/// Which of [`INPUT_TYPES`] `bytes` are, by their first bytes (their format's
/// signature); `None` for any other. An MP4 is an ISO media file of an MP4 brand:
/// the same container holds HEIC images and QuickTime films, which are not taken.
fn sniffed(bytes: &[u8]) -> Option<&'static str> {
    const MP4_BRANDS: [&[u8]; 9] = [
        b"isom", b"iso2", b"iso4", b"iso5", b"iso6", b"mp41", b"mp42", b"avc1", b"M4V ",
    ];
    // Whether `signature` is at `offset`.
    let at = |offset: usize, signature: &[u8]| {
        bytes.get(offset..offset + signature.len()) == Some(signature)
    };
    if at(0, b"\xFF\xD8\xFF") {
        Some("image/jpeg")
    } else if at(0, b"\x89PNG\r\n\x1A\n") {
        Some("image/png")
    } else if at(0, b"RIFF") && at(8, b"WEBP") {
        Some("image/webp")
    } else if at(4, b"ftyp") && MP4_BRANDS.iter().any(|brand| at(8, brand)) {
        Some("video/mp4")
    } else {
        None
    }
}

/// An uploaded file to keep in storage, named by its SHA-256 and size, with the
/// signed link the provider fetches it by.
struct Input<'a> {
    storage: &'a Storage,
    link: String,
    name: String,
    upload: Upload,
}

impl<'a> Input<'a> {
    /// The upload checked (storage on, a type the providers take), named and linked;
    /// not written yet.
    fn of(
        gateway: &'a Gateway,
        ctx: &Ctx,
        parts: &Parts,
        upload: Upload,
    ) -> Result<Self, ApiError> {
        let refused = |msg: &str| ApiError::invalid_parameter("input_reference", msg.into());
        let Some(storage) = gateway.tasks.storage() else {
            return Err(refused(
                "an uploaded `input_reference` needs the gateway's storage, which is off: pass a URL instead",
            ));
        };
        let ct = upload.content_type.as_deref().unwrap_or_default();
        let Some((_, ext)) = INPUT_TYPES.iter().find(|(t, _)| t.eq_ignore_ascii_case(ct)) else {
            return Err(refused(
                "an uploaded `input_reference` must be image/jpeg, image/png, image/webp or video/mp4",
            ));
        };
        let sha = hex::encode(ring::digest::digest(&ring::digest::SHA256, &upload.bytes));
        let name = format!("{sha}-{}.{ext}", upload.bytes.len());
        let snapshot = &ctx.snapshot;
        let ttl = Duration::from_secs(snapshot.storage.link_ttl_secs);
        // In the ledger's clock, as every replica checks it (`ledger::now_ms`).
        let expires = crate::tasks::ledger::now_ms().max(0) as u64 / 1000 + ttl.as_secs();
        let signature = snapshot.sealer.sign_input(&name, expires);
        let base = match &snapshot.storage.public_base_url {
            Some(base) => base.clone(),
            None => PublicBase::of(parts)
                .as_seen_by_client()
                .ok_or_else(|| refused("the gateway's address is not known (no Host header, no [storage] public_base_url) to link the upload by"))?,
        };
        let link = format!("{base}{INPUTS}{name}?expires={expires}&signature={signature}");
        Ok(Self {
            storage,
            link,
            name,
            upload,
        })
    }

    /// The parameters that tell a retry of the request: a retry uploads the same
    /// bytes but gets a link with another expiry, so the same request is the one
    /// naming the same stored input.
    fn same_request(&self, params: &Value) -> Value {
        let mut same = params.clone();
        replace_string(&mut same, &self.link, &format!("{INPUTS}{}", self.name));
        same
    }

    /// Write it into storage.
    async fn keep(self) -> Result<(), ApiError> {
        let storage = self.storage;
        let len = self.upload.bytes.len() as u64;
        let ct = self.upload.content_type;
        let body = http_body_util::Full::new(self.upload.bytes);
        let key = storage.input_key(&self.name);
        storage
            .put(&key, body, len, ct.as_deref())
            .await
            .map_err(|e| {
                tracing::warn!(error = %e, "storage: an uploaded input cannot be written");
                ApiError::storage_unavailable()
            })?;
        Ok(())
    }
}

/// Every string `from` in `value` made `to`.
fn replace_string(value: &mut Value, from: &str, to: &str) {
    match value {
        Value::String(s) if s == from => *s = to.to_string(),
        Value::Array(items) => items.iter_mut().for_each(|v| replace_string(v, from, to)),
        Value::Object(map) => map.values_mut().for_each(|v| replace_string(v, from, to)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::sniffed;

    #[test]
    fn an_upload_s_type_is_read_from_its_signature() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        assert_eq!(sniffed(png), Some("image/png"));
        assert_eq!(sniffed(b"\xff\xd8\xff\xe0\0\x10JFIF"), Some("image/jpeg"));
        assert_eq!(sniffed(b"RIFF\x24\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniffed(b"\0\0\0\x20ftypisom\0\0\x02\0"), Some("video/mp4"));
        assert_eq!(sniffed(b"\0\0\0\x18ftypmp42"), Some("video/mp4"));
        // The same container, not an MP4: HEIC, QuickTime; and a cut-off header.
        assert_eq!(sniffed(b"\0\0\0\x18ftypheic\0\0\0\0"), None);
        assert_eq!(sniffed(b"\0\0\0\x14ftypqt  "), None);
        assert_eq!(sniffed(b"\0\0\0\x14ftyp"), None);
        assert_eq!(sniffed(b"\x89PNG"), None);
        assert_eq!(sniffed(b"GIF89a"), None);
        assert_eq!(sniffed(b""), None);
    }
}
