//! Sealed task ids: self-contained, tamper-proof, readable only by the gateway.
//!
//! An id carries everything needed to answer a query (provider, upstream id, model,
//! media kind, owning key, creation time), sealed with ChaCha20-Poly1305 from `ring`,
//! the crypto provider rustls already uses here. So a restart loses no task, any
//! replica with the same secret answers any query, and a key cannot read another
//! key's task. Older secrets stay accepted for opening, so the secret can rotate.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use ring::{hkdf, hmac};

use crate::tasks::MediaKind;

/// Every id starts with this, so ids are recognisable in logs and support tickets.
pub const PREFIX: &str = "task_";
const VERSION: u8 = 1;
const AAD: &[u8] = b"mediagate task id v1";
const TAG_LEN: usize = 16;
/// Most bytes the four text fields of an id may take together. Ids stay short enough
/// for any URL and log line; a longer upstream id is refused at submit.
pub const MAX_FIELDS_LEN: usize = 1024;
/// Fixed bytes of a sealed id: nonce, version, created, kind, four lengths, tag.
const FIXED_LEN: usize = NONCE_LEN + 1 + 8 + 1 + 4 * 2 + TAG_LEN;
/// The longest id `seal` can make; longer ones are refused before decoding.
const MAX_ID_LEN: usize = PREFIX.len() + (FIXED_LEN + MAX_FIELDS_LEN).div_ceil(3) * 4;

/// The task's fields are too long to seal into an id (see [`MAX_FIELDS_LEN`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong;

/// What a task id says about its task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskId {
    pub provider: String,
    pub upstream_id: String,
    pub model: String,
    pub kind: MediaKind,
    /// Name of the key that created the task.
    pub owner: String,
    /// Unix seconds.
    pub created: u64,
    /// Submitted on `/v1/videos`: such an id opens only there, any other only
    /// elsewhere. Marked in the kind byte, so the ids of the other endpoints are
    /// sealed as before.
    pub openai: bool,
}

/// The kind byte's flag for [`TaskId::openai`].
const OPENAI_FLAG: u8 = 0x10;

/// Seals ids with the current secret and opens them with the current or older ones.
pub struct TaskSealer {
    current: LessSafeKey,
    previous: Vec<LessSafeKey>,
    /// Keys that sign links to stored results: from the same secrets, by another
    /// HKDF label, so that a link made by any replica opens on every other.
    links: Vec<hmac::Key>,
}

impl std::fmt::Debug for TaskSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskSealer")
            .field("previous_secrets", &self.previous.len())
            .finish_non_exhaustive()
    }
}

fn derive_key(secret: &[u8]) -> LessSafeKey {
    let key = derive(secret, b"chacha20-poly1305");
    LessSafeKey::new(
        UnboundKey::new(&CHACHA20_POLY1305, &key).expect("key length matches the algorithm"),
    )
}

fn derive_link_key(secret: &[u8]) -> hmac::Key {
    hmac::Key::new(hmac::HMAC_SHA256, &derive(secret, b"result-link"))
}

/// 32 bytes of key for `purpose` from the task secret.
fn derive(secret: &[u8], purpose: &[u8]) -> [u8; 32] {
    struct Len(usize);
    impl hkdf::KeyType for Len {
        fn len(&self) -> usize {
            self.0
        }
    }
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"mediagate-task-id").extract(secret);
    let mut key = [0u8; 32];
    prk.expand(&[purpose], Len(32))
        .and_then(|okm| okm.fill(&mut key))
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    key
}

/// Nonces fetched from the system random source at once, per thread.
const NONCES_PER_FILL: usize = 64;

struct NoncePool {
    bytes: [u8; NONCE_LEN * NONCES_PER_FILL],
    next: usize,
}

thread_local! {
    static NONCES: std::cell::RefCell<NoncePool> = const {
        std::cell::RefCell::new(NoncePool {
            bytes: [0; NONCE_LEN * NONCES_PER_FILL],
            next: NONCES_PER_FILL,
        })
    };
}

/// A fresh random nonce. Every nonce still comes from the system random source, but
/// 64 are read per system call instead of one per id; each is handed out once.
fn random_nonce() -> [u8; NONCE_LEN] {
    NONCES.with_borrow_mut(|pool| {
        if pool.next == NONCES_PER_FILL {
            SystemRandom::new()
                .fill(&mut pool.bytes)
                .expect("the system random source is available");
            pool.next = 0;
        }
        let at = pool.next * NONCE_LEN;
        pool.next += 1;
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&pool.bytes[at..at + NONCE_LEN]);
        // Never reuse a handed-out nonce, even if it stayed in memory.
        pool.bytes[at..at + NONCE_LEN].fill(0);
        nonce
    })
}

impl TaskSealer {
    /// `current` seals new ids; `previous` secrets still open old ones.
    pub fn new(current: &[u8], previous: &[Vec<u8>]) -> Self {
        Self {
            current: derive_key(current),
            previous: previous.iter().map(|s| derive_key(s)).collect(),
            links: std::iter::once(current)
                .chain(previous.iter().map(Vec::as_slice))
                .map(derive_link_key)
                .collect(),
        }
    }

    /// The signature of a link to result `n` of task `id`, valid until `expires`
    /// (Unix seconds).
    pub fn sign_link(&self, id: &str, n: usize, expires: u64) -> String {
        let tag = hmac::sign(&self.links[0], link_message(id, n, expires).as_bytes());
        URL_SAFE_NO_PAD.encode(tag.as_ref())
    }

    /// Whether `signature` was made by [`TaskSealer::sign_link`] for exactly this
    /// task, result and expiry, with the current secret or an older one (compared in
    /// constant time). Whether it has expired is the caller's to check.
    pub fn link_signed(&self, id: &str, n: usize, expires: u64, signature: &str) -> bool {
        let Ok(tag) = URL_SAFE_NO_PAD.decode(signature) else {
            return false;
        };
        let message = link_message(id, n, expires);
        self.links
            .iter()
            .any(|key| hmac::verify(key, message.as_bytes(), &tag).is_ok())
    }

    /// The signature of a link to the uploaded input `name`, valid until `expires`:
    /// what lets a provider fetch it without a key.
    pub fn sign_input(&self, name: &str, expires: u64) -> String {
        self.sign_link(&input_subject(name), 0, expires)
    }

    /// Whether `signature` was made by [`TaskSealer::sign_input`] for this input and
    /// expiry (with the current secret or an older one).
    pub fn input_signed(&self, name: &str, expires: u64, signature: &str) -> bool {
        self.link_signed(&input_subject(name), 0, expires, signature)
    }

    /// Seal a task into an opaque id.
    pub fn seal(&self, task: &TaskId) -> Result<String, TooLong> {
        let fields_len =
            task.provider.len() + task.upstream_id.len() + task.model.len() + task.owner.len();
        if fields_len > MAX_FIELDS_LEN {
            return Err(TooLong);
        }
        let mut plain = Vec::with_capacity(FIXED_LEN + fields_len);
        plain.push(VERSION);
        plain.extend_from_slice(&task.created.to_be_bytes());
        let kind = match task.kind {
            MediaKind::Video => 0,
            MediaKind::Image => 1,
        };
        plain.push(if task.openai {
            kind | OPENAI_FLAG
        } else {
            kind
        });
        for field in [&task.provider, &task.upstream_id, &task.model, &task.owner] {
            // Within MAX_FIELDS_LEN, so every length fits in u16.
            let len = u16::try_from(field.len()).map_err(|_| TooLong)?;
            plain.extend_from_slice(&len.to_be_bytes());
            plain.extend_from_slice(field.as_bytes());
        }
        let nonce = random_nonce();
        self.current
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(AAD),
                &mut plain,
            )
            .expect("plaintext is far below the AEAD size limit");
        let mut raw = Vec::with_capacity(NONCE_LEN + plain.len());
        raw.extend_from_slice(&nonce);
        raw.extend_from_slice(&plain);
        let mut id = String::with_capacity(PREFIX.len() + raw.len() * 4 / 3 + 4);
        id.push_str(PREFIX);
        URL_SAFE_NO_PAD.encode_string(&raw, &mut id);
        Ok(id)
    }

    /// Open an id. `None` for anything that is not an intact id sealed by us:
    /// callers answer every such case with the same 404.
    pub fn open(&self, id: &str) -> Option<TaskId> {
        if id.len() > MAX_ID_LEN {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(id.strip_prefix(PREFIX)?).ok()?;
        if raw.len() < NONCE_LEN + TAG_LEN + 1 {
            return None;
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        for key in std::iter::once(&self.current).chain(&self.previous) {
            let mut buf = sealed.to_vec();
            if let Ok(plain) = key.open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(AAD),
                &mut buf,
            ) {
                return decode(plain);
            }
        }
        None
    }
}

/// What an input link signs in place of a task id: never a task id (those start with
/// [`PREFIX`]), so neither link opens the other's resource.
fn input_subject(name: &str) -> String {
    format!("input/{name}")
}

fn link_message(id: &str, n: usize, expires: u64) -> String {
    format!("mediagate result link v1\n{id}\n{n}\n{expires}")
}

fn decode(mut b: &[u8]) -> Option<TaskId> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (head, tail) = b.split_at(n);
        *b = tail;
        Some(head)
    }
    fn string(b: &mut &[u8]) -> Option<String> {
        let len = u16::from_be_bytes(take(b, 2)?.try_into().ok()?);
        String::from_utf8(take(b, usize::from(len))?.to_vec()).ok()
    }
    if take(&mut b, 1)? != [VERSION] {
        return None;
    }
    let created = u64::from_be_bytes(take(&mut b, 8)?.try_into().ok()?);
    let byte = take(&mut b, 1)?[0];
    let kind = match byte & !OPENAI_FLAG {
        0 => MediaKind::Video,
        1 => MediaKind::Image,
        _ => return None,
    };
    let task = TaskId {
        created,
        kind,
        openai: byte & OPENAI_FLAG != 0,
        provider: string(&mut b)?,
        upstream_id: string(&mut b)?,
        model: string(&mut b)?,
        owner: string(&mut b)?,
    };
    b.is_empty().then_some(task)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> TaskId {
        TaskId {
            provider: "simulator".into(),
            upstream_id: "projects/p/operations/123".into(),
            model: "eta 1.1 v2 参考生视频".into(),
            kind: MediaKind::Video,
            owner: "demo".into(),
            created: 1_763_700_000,
            openai: false,
        }
    }

    #[test]
    fn seal_then_open_round_trips() {
        let s = TaskSealer::new(b"secret", &[]);
        let id = s.seal(&task()).unwrap();
        assert!(id.starts_with(PREFIX));
        assert!(
            id[PREFIX.len()..]
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert_eq!(s.open(&id), Some(task()));
        let openai = TaskId {
            openai: true,
            kind: MediaKind::Image,
            ..task()
        };
        assert_eq!(s.open(&s.seal(&openai).unwrap()), Some(openai));
    }

    #[test]
    fn an_input_link_is_no_result_link() {
        let s = TaskSealer::new(b"secret", &[]);
        let sig = s.sign_input("abc.png", 1_800_000_000);
        assert!(s.input_signed("abc.png", 1_800_000_000, &sig));
        assert!(!s.input_signed("abd.png", 1_800_000_000, &sig));
        assert!(!s.input_signed("abc.png", 1_800_000_001, &sig));
        assert!(!s.link_signed("abc.png", 0, 1_800_000_000, &sig));
    }

    #[test]
    fn a_link_signature_holds_for_its_task_result_and_expiry_only() {
        let s = TaskSealer::new(b"secret", &[]);
        let sig = s.sign_link("task_a", 0, 1_800_000_000);
        assert!(s.link_signed("task_a", 0, 1_800_000_000, &sig));
        assert!(
            !s.link_signed("task_b", 0, 1_800_000_000, &sig),
            "another task"
        );
        assert!(
            !s.link_signed("task_a", 1, 1_800_000_000, &sig),
            "another result"
        );
        assert!(
            !s.link_signed("task_a", 0, 1_800_000_001, &sig),
            "another expiry"
        );
        let mut tampered = sig.clone().into_bytes();
        tampered[0] = if tampered[0] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).unwrap();
        assert!(!s.link_signed("task_a", 0, 1_800_000_000, &tampered));
        assert!(!s.link_signed("task_a", 0, 1_800_000_000, "not base64!"));
        // After a rotation, links signed with the old secret still open; another
        // secret's never do.
        let rotated = TaskSealer::new(b"new secret", &[b"secret".to_vec()]);
        assert!(rotated.link_signed("task_a", 0, 1_800_000_000, &sig));
        let other = TaskSealer::new(b"other", &[]);
        assert!(!other.link_signed("task_a", 0, 1_800_000_000, &sig));
    }

    #[test]
    fn ids_are_not_deterministic_and_hide_their_content() {
        let s = TaskSealer::new(b"secret", &[]);
        let (a, b) = (s.seal(&task()).unwrap(), s.seal(&task()).unwrap());
        assert_ne!(a, b);
        assert!(!a.contains("simulator"));
    }

    #[test]
    fn nonces_stay_unique_across_refills() {
        let nonces: std::collections::HashSet<[u8; NONCE_LEN]> =
            (0..NONCES_PER_FILL * 5).map(|_| random_nonce()).collect();
        assert_eq!(nonces.len(), NONCES_PER_FILL * 5);
    }

    #[test]
    fn any_flipped_character_is_refused() {
        let s = TaskSealer::new(b"secret", &[]);
        let id = s.seal(&task()).unwrap();
        for i in PREFIX.len()..id.len() {
            let mut bytes = id.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let tampered = String::from_utf8(bytes).unwrap();
            if tampered != id {
                assert_eq!(s.open(&tampered), None, "position {i}");
            }
        }
    }

    #[test]
    fn garbage_and_truncation_are_refused() {
        let s = TaskSealer::new(b"secret", &[]);
        let id = s.seal(&task()).unwrap();
        for bad in [
            "",
            "task_",
            "task_!!!",
            "nope",
            &id[..id.len() - 3],
            &"task_A".repeat(1000),
        ] {
            assert_eq!(s.open(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_sealable_id_opens_and_longer_fields_are_refused() {
        let s = TaskSealer::new(b"secret", &[]);
        let mut t = task();
        let others = t.provider.len() + t.model.len() + t.owner.len();
        t.upstream_id = "x".repeat(MAX_FIELDS_LEN - others);
        let id = s.seal(&t).unwrap();
        assert!(id.len() <= MAX_ID_LEN);
        assert_eq!(s.open(&id), Some(t.clone()));
        t.upstream_id.push('x');
        assert_eq!(s.seal(&t), Err(TooLong));
    }

    #[test]
    fn another_secret_cannot_open_but_rotation_can() {
        let old = TaskSealer::new(b"old", &[]);
        let id = old.seal(&task()).unwrap();
        assert_eq!(TaskSealer::new(b"new", &[]).open(&id), None);
        let rotated = TaskSealer::new(b"new", &[b"old".to_vec()]);
        assert_eq!(rotated.open(&id), Some(task()));
    }
}
