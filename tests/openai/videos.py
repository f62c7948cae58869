"""The official `openai` Python SDK against mediagate's /v1/videos (tests/it/openai_sdk.rs).

python videos.py BASE_URL KEY SCENARIO [ARGS...]: runs one scenario and prints one
JSON object of what the SDK gave, for the Rust test to assert on.
"""

import json
import sys
import warnings

import openai

# The SDK marks the videos API deprecated (OpenAI's own shut down); mediagate serves it.
warnings.simplefilter("ignore", DeprecationWarning)


def client(base_url, key):
    # No retries: a refusal must come out as the SDK's exception at once.
    return openai.OpenAI(api_key=key, base_url=base_url, max_retries=0)


def refusal(e):
    return {"exception": type(e).__name__, "status": e.status_code, "code": e.code, "param": e.param}


def create_poll_download(c, out_path):
    video = c.videos.create_and_poll(
        model="deltaq3-pro", prompt="a cat", seconds="8", size="1280x720", poll_interval_ms=100
    )
    c.videos.download_content(video.id, variant="video").write_to_file(out_path)
    return video.model_dump()


def list_all(c, count):
    created = [c.videos.create(model="deltaq3-pro", prompt=f"video {n}").id for n in range(int(count))]
    # Auto-pagination: the SDK follows `after=last_id` while `has_more`.
    listed = [v.id for v in c.videos.list(limit=4)]
    return {"created": created, "listed": listed}


def delete(c):
    # Finished first: the simulated provider cannot cancel an unfinished task.
    video = c.videos.create_and_poll(model="deltaq3-pro", prompt="to delete", poll_interval_ms=100)
    deleted = c.videos.delete(video.id)
    listed = [v.id for v in c.videos.list()]
    return {"created": video.id, "deleted": deleted.model_dump(), "listed": listed}


def bad_seconds(c):
    try:
        c.videos.create(model="deltaq3-pro", prompt="too long", seconds="99")
    except openai.APIStatusError as e:
        return refusal(e)
    return {"exception": None}


def call(fn):
    try:
        fn()
    except openai.APIStatusError as e:
        return refusal(e)
    return {"exception": None}


def refusals(c, base_url):
    return {
        "wrong_key": call(lambda: client(base_url, "sk-wrong").videos.list()),
        "not_found": call(lambda: c.videos.retrieve("task_unknown")),
        "bad_seconds": bad_seconds(c),
        "remix": call(lambda: c.videos.remix("task_unknown", prompt="again")),
    }


def rate_limited(c):
    seen = []
    for _ in range(5):
        seen.append(call(lambda: c.videos.list()))
    return {"seen": seen}


def upload(c, model, path, content_type):
    with open(path, "rb") as f:
        data = f.read()
    video = c.videos.create(model=model, prompt="from an image", input_reference=("in.png", data, content_type))
    return video.model_dump()


def unwrap(c, delivery_path, secret):
    with open(delivery_path) as f:
        delivery = json.load(f)
    body, headers = delivery["body"], delivery["headers"]
    event = c.webhooks.unwrap(body, headers, secret=secret)
    tampered = body.replace('"video.', '"video.x')
    try:
        c.webhooks.unwrap(tampered, headers, secret=secret)
        rejected = None
    except openai.InvalidWebhookSignatureError as e:
        rejected = type(e).__name__
    return {"type": event.type, "object": event.object, "id": event.id, "data_id": event.data.id,
            "tampered": rejected}


def main():
    base_url, key, scenario, *args = sys.argv[1:]
    c = client(base_url, key)
    if scenario == "refusals":
        out = refusals(c, base_url)
    else:
        out = globals()[scenario](c, *args)
    out["sdk_version"] = openai.__version__
    print(json.dumps(out))


main()
