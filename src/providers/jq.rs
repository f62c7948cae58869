//! jq programs from routes.toml, compiled once at config load (jaq): how requests are
//! built and answers read.
//!
//! Every program sees the same variables, so an operator never has to remember
//! which step offers which: `$model`, `$upstream_model`, `$kind` (`"video"` or
//! `"image"`), `$id` (the upstream task id, null before it exists), `$params`
//! (the validated parameters during submit; null afterwards, since task ids do not
//! carry them) and `$answer` (the provider's final status answer, for a price's
//! `settle`; null elsewhere). What `.` is for each program is listed in docs/providers.md.
//!
//! The environment is not theirs to read: jaq's `env` (and so `$ENV`) is not offered,
//! since the process environment holds the task secret and every provider's key; a
//! `halt` is an error of the program, never an exit of the process.

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data};
use jaq_json::Val;
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::by_model::ByModel;

use crate::config::Scope;
use crate::tasks::MediaKind;

type Data = data::JustLut<Val>;

/// Filters of jaq's standard library that programs do not get: `env` reads the process
/// environment (secrets).
const WITHHELD: [&str; 1] = ["env"];

/// Names of the variables every program may use, in the order values are supplied.
pub const VARIABLES: [&str; 6] = [
    "$model",
    "$upstream_model",
    "$kind",
    "$id",
    "$params",
    "$answer",
];

/// The variables whose values the model alone decides (by the configuration).
const MODEL_VARIABLES: [&str; 3] = ["$model", "$upstream_model", "$kind"];

/// Values of [`VARIABLES`] for one run.
pub struct JqVars {
    values: [Val; VARIABLES.len()],
}

impl JqVars {
    pub fn new(
        model: &str,
        upstream_model: &str,
        kind: MediaKind,
        id: Option<&str>,
        params: Option<Val>,
    ) -> Self {
        Self {
            values: [
                Val::from(model.to_owned()),
                Val::from(upstream_model.to_owned()),
                Val::from(kind.as_str().to_owned()),
                id.map_or(Val::Null, |id| Val::from(id.to_owned())),
                params.unwrap_or(Val::Null),
                Val::Null,
            ],
        }
    }

    /// The same with `$answer`: a provider's final status answer.
    #[must_use]
    pub fn with_answer(mut self, answer: Val) -> Self {
        self.values[5] = answer;
        self
    }

    /// The values of [`MODEL_VARIABLES`], as text: what a program that reads only
    /// those gives the same output for.
    pub fn model_values(&self) -> Option<[&[u8]; 3]> {
        fn text(v: &Val) -> Option<&[u8]> {
            match v {
                Val::TStr(b) => Some(b),
                _ => None,
            }
        }
        Some([
            text(&self.values[0])?,
            text(&self.values[1])?,
            text(&self.values[2])?,
        ])
    }
}

/// A compiled jq program.
pub struct Jq {
    filter: jaq_core::Filter<Data>,
    source: String,
    /// The output of a program that is a plain string literal (most `path`s): known
    /// at load, so no request runs it.
    constant: Option<String>,
    /// The keys of a program that only reads a field (`.id`, `.data.status`, what
    /// most answers are read with): followed here on objects and nulls, where jq's
    /// result is plain; anything else is left to jaq, errors included.
    fields: Option<Vec<bytes::Bytes>>,
    /// The program reads nothing but [`MODEL_VARIABLES`]: its output is the same for
    /// every request of a model.
    model_only: bool,
    /// For a program `O + .` where `O` reads only [`MODEL_VARIABLES`] (the usual
    /// `{model: $upstream_model} + .` of a submit body): `O`'s fields by model. See
    /// [`Jq::write_merged`].
    merged: Option<OwnFields>,
    /// A program that is a string of text and variables (`"/tasks/\($id | @uri)"`,
    /// most query paths): its pieces, written here when the variables are strings.
    template: Option<Box<[Piece]>>,
}

/// A piece of a [`Jq::template`] program.
#[derive(Debug, PartialEq)]
enum Piece {
    Text(String),
    /// The variable at this index of [`VARIABLES`], percent-encoded as `@uri` does
    /// when `uri`.
    Var {
        index: usize,
        uri: bool,
    },
}

/// What `@uri` (`encode_uri`) leaves as it is: ASCII letters, digits and `-_.~`.
const URI_KEPT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The fields of `O` (of an `O + .` program), each value as the JSON text `AsJson`
/// writes: the same for every request of a model, so `O` runs once per model.
/// `None` where `O` gives neither an object nor null: jaq runs the whole program.
type OwnFields = ByModel<Option<OwnFieldTexts>>;

type OwnFieldTexts = std::sync::Arc<[(String, Box<RawValue>)]>;

impl std::fmt::Debug for Jq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Jq").field(&self.source).finish()
    }
}

impl Jq {
    /// Parse and compile; the error says where and what is wrong.
    pub fn compile(code: &str) -> Result<Self, String> {
        let defs = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let funs = jaq_core::funs()
            .chain(jaq_std::funs().filter(|(name, ..)| !WITHHELD.contains(name)))
            .chain(jaq_json::funs());
        let arena = Arena::default();
        let loader = Loader::new(defs);
        let modules = loader
            .load(&arena, File { code, path: () })
            .map_err(|errs| {
                errs.into_iter()
                    .map(|(_, e)| load_error(code, e))
                    .collect::<Vec<_>>()
                    .join("; ")
            })?;
        let filter = Compiler::default()
            .with_funs(funs)
            .with_global_vars(VARIABLES)
            .compile(modules)
            .map_err(|errs| {
                errs.into_iter()
                    .flat_map(|(_, es)| es)
                    .map(|(name, undef)| format!("undefined {} `{name}`", undef.as_str()))
                    .collect::<Vec<_>>()
                    .join("; ")
            })?;
        // A JSON string is a jq string literal with the same meaning (jq's escapes are
        // JSON's; an interpolation `\(…)` is not valid JSON).
        let constant = serde_json::from_str::<String>(code.trim()).ok();
        // The shapes computed without jaq are read from the program's syntax.
        let program = syntax(code);
        let program = program.as_ref();
        // A string literal is the constant already.
        let template = program.filter(|_| constant.is_none()).and_then(template);
        Ok(Self {
            filter,
            source: code.to_owned(),
            constant,
            fields: field_path(code),
            model_only: program.is_some_and(reads_only_the_model),
            merged: program.is_some_and(merges_input).then(OwnFields::default),
            template,
        })
    }

    /// Whether the output depends on nothing but the model (see
    /// [`reads_only_the_model`]): the same for every request of one model.
    pub fn model_only(&self) -> bool {
        self.model_only
    }

    /// Compile the program at `key` of a block; a problem is recorded there if it
    /// does not compile.
    pub fn at(at: &mut Scope, key: &str, code: &str) -> Option<Self> {
        at.check(key, Self::compile(code).map_err(|e| format!("jq: {e}")))
    }

    /// [`Jq::at`] for an optional program: `Some(None)` when there is none.
    pub fn optional_at(at: &mut Scope, key: &str, code: &Option<String>) -> Option<Option<Self>> {
        match code {
            None => Some(None),
            Some(code) => Self::at(at, key, code).map(Some),
        }
    }

    /// Whether the output is a string known at load.
    pub(super) fn is_constant(&self) -> bool {
        self.constant.is_some()
    }

    /// The keys of a program that only reads a field (`.a.b`), if it is one.
    pub(super) fn field_keys(&self) -> Option<&[bytes::Bytes]> {
        self.fields.as_deref()
    }

    /// Run on `input`; the first output, or `None` when the program yields nothing.
    pub fn first(&self, input: Val, vars: &JqVars) -> Result<Option<Val>, String> {
        if let Some(text) = self.text(vars) {
            return Ok(Some(Val::from(text)));
        }
        self.read(input, vars)
    }

    /// The output of a program that is a string known without running it: a constant,
    /// or a template whose variables are strings.
    fn text(&self, vars: &JqVars) -> Option<String> {
        self.constant.clone().or_else(|| self.fill(vars))
    }

    /// The output of any other program: a field followed here, or jaq's.
    fn read(&self, input: Val, vars: &JqVars) -> Result<Option<Val>, String> {
        if let Some(found) = self.fields.as_deref().and_then(|keys| follow(&input, keys)) {
            return Ok(Some(found));
        }
        self.run(input, vars)
    }

    /// The output of a [`template`] program, when every variable it reads is a string
    /// (as jq writes it: a string interpolated as it is, `@uri` percent-encoding it).
    fn fill(&self, vars: &JqVars) -> Option<String> {
        let mut out = String::new();
        for piece in self.template.as_deref()? {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Var { index, uri } => {
                    let Val::TStr(value) = &vars.values[*index] else {
                        return None;
                    };
                    let value = std::str::from_utf8(value).ok()?;
                    if *uri {
                        out.extend(percent_encoding::utf8_percent_encode(value, URI_KEPT));
                    } else {
                        out.push_str(value);
                    }
                }
            }
        }
        Some(out)
    }

    /// jaq's own output, no short way taken: what the short ways are tested against.
    #[cfg(test)]
    pub(super) fn by_jaq(&self, input: Val, vars: &JqVars) -> Result<Option<Val>, String> {
        self.run(input, vars)
    }

    /// Run by jaq.
    fn run(&self, input: Val, vars: &JqVars) -> Result<Option<Val>, String> {
        let ctx = Ctx::<Data>::new(&self.filter.lut, Vars::new(vars.values.iter().cloned()));
        match self.filter.id.run((ctx, input)).next() {
            None => Ok(None),
            Some(Ok(v)) => Ok(Some(v)),
            // jaq's own `unwrap_valr` would exit the process on `halt`.
            Some(Err(e)) => match e.get_err() {
                Ok(e) => Err(elide_values(&e.to_string())),
                Err(_) => Err("the program halted".into()),
            },
        }
    }

    /// Run and convert the first output to JSON (`null` when there is none).
    pub fn json(&self, input: Val, vars: &JqVars) -> Result<Value, String> {
        if let Some(text) = self.text(vars) {
            return Ok(Value::String(text));
        }
        Ok(self.read(input, vars)?.map_or(Value::Null, |v| to_json(&v)))
    }
}

impl Jq {
    /// The output of an `O + .` program (see [`merges_input`]) on the object `input`,
    /// as JSON text, without making `input` a jq value: the program is run on `{}`,
    /// once per model, for `O`'s fields (`O` reads only the model's variables, so
    /// they are what they would be on `input`), and `input`'s fields are written over
    /// them, as jq's `+` of two objects does. `None` when the program is not of that
    /// shape, or `O` gives neither an object nor null: jaq's to run then.
    pub fn write_merged(
        &self,
        input: &serde_json::Map<String, Value>,
        vars: &JqVars,
    ) -> Option<Vec<u8>> {
        let own = self.own_fields(self.merged.as_ref()?, vars)?;
        let mut fields = Vec::with_capacity(own.len() + input.len());
        fields.extend(own.iter().map(|(k, v)| (k.as_str(), Merged::Own(v))));
        fields.extend(input.iter().map(|(k, v)| (k.as_str(), Merged::Input(v))));
        // Sorted by key, the last of equal keys kept (the input's), as `AsJson` writes
        // an object.
        fields.sort_by(|a, b| a.0.cmp(b.0));
        Some(crate::response::json_bytes(&MergedFields(fields)))
    }

    /// `O`'s fields for the model of `vars`, from `known` or run now.
    fn own_fields(&self, known: &OwnFields, vars: &JqVars) -> Option<OwnFieldTexts> {
        let model = vars.model_values()?;
        if let Some(fields) = known.get(model) {
            return fields;
        }
        let fields = self.run_own(vars);
        known.add(model, fields.clone());
        fields
    }

    /// The program (`O + .`) run on `{}`, which gives `O`'s fields (`{}` when `O` is
    /// null): as JSON text.
    fn run_own(&self, vars: &JqVars) -> Option<OwnFieldTexts> {
        let Ok(Some(Val::Obj(own))) = self.run(Val::Obj(std::rc::Rc::default()), vars) else {
            return None;
        };
        own.iter()
            .map(|(key, value)| {
                // Keys that are not strings are written as AsJson writes them: jaq's way.
                let Val::TStr(key) = key else { return None };
                let text = String::from_utf8(write_json(value)).ok()?;
                let key = String::from_utf8_lossy(key).into_owned();
                Some((key, RawValue::from_string(text).ok()?))
            })
            .collect()
    }
}

/// The fields of `O + .`, sorted, where equal keys are next to each other.
struct MergedFields<'a>(Vec<(&'a str, Merged<'a>)>);

enum Merged<'a> {
    Own(&'a RawValue),
    Input(&'a Value),
}

impl serde::Serialize for MergedFields<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        for (i, (key, value)) in self.0.iter().enumerate() {
            if self.0.get(i + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            match value {
                Merged::Own(v) => map.serialize_entry(key, v)?,
                Merged::Input(v) => map.serialize_entry(key, &InputJson(v))?,
            }
        }
        map.end()
    }
}

/// A parameter written as `AsJson` would write it once made a jq value: strings,
/// booleans, null and integers are the same text either way (written directly);
/// anything else goes through the jq value, so that numbers are written jaq's way.
struct InputJson<'a>(&'a Value);

impl serde::Serialize for InputJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Null | Value::Bool(_) | Value::String(_) => self.0.serialize(s),
            Value::Number(n) if n.is_i64() => self.0.serialize(s),
            other => AsJson(&from_json(other)).serialize(s),
        }
    }
}

/// Whether a program's output depends on nothing but [`MODEL_VARIABLES`]: judged on
/// its syntax, conservatively. Literals, strings with interpolations, arrays, objects,
/// operators, `|`, `,`, `//`, `if` and those variables qualify (`{kind: $kind}`,
/// `"/v1/\($upstream_model | @uri)/tasks"`); so do `.` and a few pure conversions
/// (formats such as `@uri`, `tostring`, `ascii_downcase`) right of a `|` whose left
/// side qualifies. Any other variable, path or call (a filter may read the request,
/// or the clock) does not, nor does `{a}` (short for `{a: .a}`).
fn reads_only_the_model(program: &Syntax) -> bool {
    model_only(program, false)
}

/// A program's syntax, as jaq parses it.
type Syntax<'a> = jaq_core::load::parse::Term<&'a str>;

/// The syntax of `code`, when it is one term (every program that compiles is).
fn syntax(code: &str) -> Option<Syntax<'_>> {
    jaq_core::load::parse(code, |p| p.term())
}

/// Whether a program is `O + .` with `O` as [`reads_only_the_model`] judges it.
fn merges_input(program: &Syntax) -> bool {
    use jaq_core::load::parse::{BinaryOp, Term};
    match program {
        Term::BinOp(l, BinaryOp::Math(jaq_core::ops::Math::Add), r) => {
            matches!(**r, Term::Id) && model_only(l, false)
        }
        _ => false,
    }
}

/// The pieces of a program that is one string of text and interpolated variables,
/// each alone or piped to `@uri` (`"/v1/tasks/\($id | @uri)"`), if it is one.
fn template(program: &Syntax) -> Option<Box<[Piece]>> {
    use jaq_core::load::lex::StrPart;
    use jaq_core::load::parse::{BinaryOp, Term};
    let Term::Str(None, parts) = program else {
        return None;
    };
    let piece = |part: &StrPart<&str, Term<&str>>| match part {
        StrPart::Str(text) => Some(Piece::Text((*text).to_owned())),
        StrPart::Char(c) => Some(Piece::Text(c.to_string())),
        StrPart::Term(term) => {
            let (name, uri) = match term {
                Term::Var(name) => (name, false),
                Term::BinOp(l, BinaryOp::Pipe(None), r) => match (&**l, &**r) {
                    (Term::Var(name), Term::Call("@uri", args)) if args.is_empty() => (name, true),
                    _ => return None,
                },
                _ => return None,
            };
            let index = VARIABLES.iter().position(|v| v == name)?;
            Some(Piece::Var { index, uri })
        }
    };
    parts.iter().map(piece).collect()
}

/// [`reads_only_the_model`] of a parsed term; `dot`: whether `.` is itself decided
/// by the model (right of such a `|`).
fn model_only(t: &jaq_core::load::parse::Term<&str>, dot: bool) -> bool {
    use jaq_core::load::lex::StrPart;
    use jaq_core::load::parse::{BinaryOp, Term};
    const PURE: [&str; 5] = [
        "tostring",
        "tojson",
        "ascii_downcase",
        "ascii_upcase",
        "length",
    ];
    let var = |t: &Term<&str>| matches!(t, Term::Var(v) if MODEL_VARIABLES.contains(v));
    match t {
        Term::Num(_) => true,
        Term::Var(_) => var(t),
        Term::Id => dot,
        // `null`, `true` and `false` are filters of jaq's, constants all three.
        Term::Call(name, args) if args.is_empty() && ["null", "true", "false"].contains(name) => {
            true
        }
        Term::Call(name, args) => {
            dot && args.is_empty() && (name.starts_with('@') || PURE.contains(name))
        }
        Term::Str(_, parts) => parts.iter().all(|part| match part {
            StrPart::Term(t) => model_only(t, dot),
            StrPart::Str(_) | StrPart::Char(_) => true,
        }),
        Term::Arr(items) => items.as_deref().is_none_or(|t| model_only(t, dot)),
        Term::Obj(fields) => fields.iter().all(|(key, value)| match value {
            Some(value) => model_only(key, dot) && model_only(value, dot),
            // `{$kind}` is `{kind: $kind}`; `{a}` reads `.a`.
            None => var(key),
        }),
        Term::Neg(t) => model_only(t, dot),
        Term::BinOp(l, BinaryOp::Pipe(None), r) => model_only(l, dot) && model_only(r, true),
        Term::BinOp(l, op, r) => {
            matches!(
                op,
                BinaryOp::Comma
                    | BinaryOp::Alt
                    | BinaryOp::Or
                    | BinaryOp::And
                    | BinaryOp::Math(_)
                    | BinaryOp::Cmp(_)
            ) && model_only(l, dot)
                && model_only(r, dot)
        }
        Term::IfThenElse(branches, otherwise) => {
            branches
                .iter()
                .all(|(cond, then)| model_only(cond, dot) && model_only(then, dot))
                && otherwise.as_deref().is_none_or(|t| model_only(t, dot))
        }
        _ => false,
    }
}

/// The keys of a program of the form `.a.b.c` (identifiers only), if it is one.
fn field_path(code: &str) -> Option<Vec<bytes::Bytes>> {
    let code = code.trim().strip_prefix('.')?;
    code.split('.')
        .map(|key| {
            let mut chars = key.chars();
            let first = chars.next()?;
            let ident = (first.is_ascii_alphabetic() || first == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
            ident.then(|| bytes::Bytes::copy_from_slice(key.as_bytes()))
        })
        .collect()
}

/// `.k1.k2…` on `input` where jq's answer is plain: an object gives its field (or
/// null), null gives null. `None` when some step is neither, for jaq to answer.
fn follow(input: &Val, keys: &[bytes::Bytes]) -> Option<Val> {
    let mut at = input;
    for key in keys {
        match at {
            Val::Obj(fields) => {
                let key = Val::TStr(Box::new(key.clone()));
                match fields.get(&key) {
                    Some(v) => at = v,
                    None => return Some(Val::Null),
                }
            }
            Val::Null => return Some(Val::Null),
            _ => return None,
        }
    }
    Some(at.clone())
}

/// A jq value as JSON text: what `to_json` and then serde_json would write (the same
/// conversions, object keys in order), without building the `serde_json::Value`.
pub fn write_json(v: &Val) -> Vec<u8> {
    crate::response::json_bytes(&AsJson(v))
}

struct AsJson<'a>(&'a Val);

impl serde::Serialize for AsJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Val::Null => s.serialize_unit(),
            Val::Bool(b) => s.serialize_bool(*b),
            Val::Num(n) => num_to_json(n).serialize(s),
            Val::TStr(b) | Val::BStr(b) => s.serialize_str(&String::from_utf8_lossy(b)),
            Val::Arr(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a.iter() {
                    seq.serialize_element(&AsJson(v))?;
                }
                seq.end()
            }
            Val::Obj(o) => {
                // As a serde_json map would hold them: sorted by key, the last of
                // equal keys kept.
                let mut fields: Vec<(std::borrow::Cow<'_, str>, &Val)> = o
                    .iter()
                    .map(|(k, v)| {
                        let key = match k {
                            Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b),
                            other => other.to_string().into(),
                        };
                        (key, v)
                    })
                    .collect();
                fields.sort_by(|a, b| a.0.cmp(&b.0));
                let mut map = s.serialize_map(None)?;
                for (i, (k, v)) in fields.iter().enumerate() {
                    if fields.get(i + 1).is_some_and(|next| next.0 == *k) {
                        continue;
                    }
                    map.serialize_entry(k, &AsJson(v))?;
                }
                map.end()
            }
        }
    }
}

fn load_error(code: &str, e: jaq_core::load::Error<&str>) -> String {
    use jaq_core::load::Error;
    let at = |part: &str| {
        let span = jaq_core::load::span(code, part);
        format!("at character {}", span.start + 1)
    };
    match e {
        Error::Io(errs) => errs
            .into_iter()
            .map(|(path, msg)| format!("cannot import `{path}`: {msg}"))
            .collect::<Vec<_>>()
            .join("; "),
        Error::Lex(errs) => errs
            .into_iter()
            .map(|(expect, part)| format!("expected {} {}", expect.as_str(), at(part)))
            .collect::<Vec<_>>()
            .join("; "),
        Error::Parse(errs) => errs
            .into_iter()
            .map(|(expect, part)| {
                let found = if part.is_empty() {
                    "end of program".to_string()
                } else {
                    format!("`{}`", part.chars().take(20).collect::<String>())
                };
                format!("expected {}, found {found} {}", expect.as_str(), at(part))
            })
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// jq runtime errors quote the value they failed on, which comes from the upstream
/// answer (URLs, tokens, whatever it holds). Errors reach clients, so a quoted value
/// longer than a short word (a key name, a status word) is left out whole: no prefix of
/// a secret remains for redaction to miss. Escaped quotes stay inside their value.
pub fn elide_values(message: &str) -> String {
    const KEEP: usize = 16;
    let mut out = String::with_capacity(message.len().min(256));
    let mut value = String::new();
    let (mut in_quote, mut escaped, mut chars) = (false, false, 0usize);
    for c in message.chars() {
        if !in_quote {
            out.push(c);
            in_quote = c == '"';
            continue;
        }
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
            chars += 1;
        } else if c == '"' {
            if chars <= KEEP {
                out.push_str(&value);
            } else {
                out.push('…');
            }
            out.push('"');
            (in_quote, chars) = (false, 0);
            value.clear();
            continue;
        } else {
            chars += 1;
        }
        if chars <= KEEP {
            value.push(c);
        }
    }
    if in_quote {
        // An unterminated value (a message cut short): left out likewise.
        out.push_str(if chars <= KEEP { &value } else { "…" });
    }
    out
}

/// Deepest array/object nesting accepted in an upstream answer. jaq's reader recurses
/// once per level, so an unbounded depth could overflow the stack and abort the
/// process; real answers nest a few levels. serde_json uses the same limit.
pub const MAX_DEPTH: usize = 128;

/// JSON text → jq value, without an intermediate `serde_json::Value`.
pub fn parse(bytes: &[u8]) -> Result<Val, String> {
    if nested_deeper_than(bytes, MAX_DEPTH) {
        return Err(format!("nested deeper than {MAX_DEPTH} levels"));
    }
    jaq_json::read::parse_single(bytes).map_err(|e| e.to_string())
}

/// Whether `[` and `{` nest deeper than `limit` outside strings: a cheap scan before
/// the recursive parse. Counting the brackets (a loop the compiler vectorises) settles
/// it for every text with fewer of them than the limit.
pub(super) fn nested_deeper_than(bytes: &[u8], limit: usize) -> bool {
    let opening = bytes.iter().filter(|&&b| b == b'[' || b == b'{').count();
    opening > limit && nesting_depth(bytes) > limit
}

/// Deepest nesting of `[` and `{` outside strings and outside the `#` comments jaq's
/// reader skips (to the end of the line), as that reader sees the text: malformed
/// input is left for it to refuse.
fn nesting_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    let mut in_comment = false;
    for &b in bytes {
        if in_comment {
            in_comment = b != b'\n';
            continue;
        }
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'#' => in_comment = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// `serde_json::Value` → jq value.
pub fn from_json(value: &Value) -> Val {
    Val::deserialize(value).unwrap_or(Val::Null)
}

/// jq value → `serde_json::Value`. Non-string object keys become their JSON text;
/// NaN and infinities become null, as in jq's own output.
pub fn to_json(v: &Val) -> Value {
    match v {
        Val::Null => Value::Null,
        Val::Bool(b) => Value::Bool(*b),
        Val::Num(n) => num_to_json(n),
        Val::TStr(s) | Val::BStr(s) => Value::String(String::from_utf8_lossy(s).into_owned()),
        Val::Arr(a) => Value::Array(a.iter().map(to_json).collect()),
        Val::Obj(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Val::TStr(s) | Val::BStr(s) => String::from_utf8_lossy(s).into_owned(),
                        other => other.to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
    }
}

fn num_to_json(n: &jaq_json::Num) -> Value {
    use jaq_json::Num;
    match n {
        Num::Int(i) => Value::from(*i as i64),
        Num::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Num::Dec(s) => serde_json::from_str::<serde_json::Number>(s)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        Num::BigInt(b) => {
            let text = b.to_string();
            serde_json::from_str::<serde_json::Number>(&text)
                .map(Value::Number)
                .unwrap_or(Value::Null)
        }
    }
}

/// A jq value as text: strings as they are, numbers and the rest as JSON.
pub fn to_text(v: &Val) -> Option<String> {
    match v {
        Val::Null => None,
        Val::TStr(s) | Val::BStr(s) => Some(String::from_utf8_lossy(s).into_owned()),
        other => Some(to_json(other).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars() -> JqVars {
        JqVars::new(
            "sd_2.0_special",
            "seedance-2",
            MediaKind::Video,
            Some("ops/1"),
            None,
        )
    }

    /// Programs whose output the model alone decides.
    const MODEL_ONLY: [&str; 10] = [
        r#""/v2/model-center/tasks""#,
        "{kind: $kind}",
        "{$kind, model: $upstream_model}",
        r#""/v1/\($upstream_model | @uri)/generate""#,
        r#"if $kind == "video" then "/videos" else "/images" end"#,
        r#"[$model, 1, -2] | {m: ($model + "-x")}"#,
        r#"$upstream_model | ascii_downcase | "/m/\(.)/\(@uri)""#,
        "{a: null, b: true, c: [false]}",
        r#"$model | tojson | length"#,
        r#"($kind == "image") // [$model, -1.5] | tostring"#,
    ];

    #[test]
    fn knows_the_programs_that_read_only_the_model() {
        for code in MODEL_ONLY {
            assert!(Jq::compile(code).unwrap().model_only(), "{code}");
        }
        for code in [
            ".",
            ".id",
            "{a}",
            "{kind: $kind, p: $params.prompt}",
            r#""/tasks/\($id)""#,
            "now",
            "{t: now}",
            "@uri",
            r#"@uri "/tasks/\(.)""#,
            "tostring",
            "$model | ltrimstr(.)",
            "$model | debug",
            "$model | .a",
            "{kind: $kind} + .",
            r#"$model as $m | $m"#,
            "reduce (1, 2) as $x (0; . + $x)",
        ] {
            assert!(!Jq::compile(code).unwrap().model_only(), "{code}");
        }
    }

    #[test]
    fn reshapes_with_variables() {
        let jq = Jq::compile(r#"{model: $upstream_model, input: {prompt}, parameters: {duration: (.duration | tostring)}}"#)
            .unwrap();
        let out = jq
            .json(from_json(&json!({"prompt": "cat", "duration": 8})), &vars())
            .unwrap();
        assert_eq!(
            out,
            json!({"model": "seedance-2", "input": {"prompt": "cat"}, "parameters": {"duration": "8"}})
        );
    }

    #[test]
    fn builds_paths_with_uri_escaping() {
        let jq = Jq::compile(r#""/tasks/\($id | @uri)""#).unwrap();
        assert_eq!(
            jq.json(Val::Null, &vars()).unwrap(),
            json!("/tasks/ops%2F1")
        );
    }

    #[test]
    fn extracts_deep_array_results() {
        let jq = Jq::compile("[.data.task_result.videos[].url]").unwrap();
        let input =
            parse(br#"{"data":{"task_result":{"videos":[{"url":"a"},{"url":"b"}]}}}"#).unwrap();
        assert_eq!(jq.json(input, &vars()).unwrap(), json!(["a", "b"]));
    }

    #[test]
    fn empty_output_is_none_and_errors_are_reported() {
        let jq = Jq::compile("empty").unwrap();
        assert_eq!(
            jq.first(Val::Null, &vars()).unwrap().map(|v| to_json(&v)),
            None
        );
        let jq = Jq::compile(".a.b").unwrap();
        assert!(jq.first(from_json(&json!({"a": "str"})), &vars()).is_err());
    }

    #[test]
    fn string_literals_are_known_at_load_and_mean_what_jq_makes_of_them() {
        let vars = JqVars::new("m", "um", MediaKind::Video, Some("t1"), None);
        for code in [
            r#""/v2/model-center/tasks""#,
            r#" "a\tb\u00e9\"\/" "#,
            r#""/tasks/\($id)""#,
            r#""/a" + "/b""#,
        ] {
            let jq = Jq::compile(code).unwrap();
            let run = |jq: &Jq| jq.json(Val::Null, &vars).unwrap();
            let mut by_jaq = Jq::compile(code).unwrap();
            by_jaq.constant = None;
            assert_eq!(run(&jq), run(&by_jaq), "{code}");
        }
        assert!(
            Jq::compile(r#""/v2/model-center/tasks""#)
                .unwrap()
                .constant
                .is_some()
        );
        assert!(
            Jq::compile(r#""/tasks/\($id)""#)
                .unwrap()
                .constant
                .is_none()
        );
        assert!(Jq::compile(r#""/a" + "/b""#).unwrap().constant.is_none());
        assert_eq!(
            Jq::compile(r#""/tasks/\($id)""#)
                .unwrap()
                .json(Val::Null, &vars)
                .unwrap(),
            "/tasks/t1"
        );
    }

    /// JSON values with a few repeated keys, so that paths often hit.
    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[abi_]{1,2}|id|data", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn field_programs_answer_as_jaq_does(
            value in any_json(),
            keys in proptest::collection::vec("[abi_]{1,2}|id|data|_0|i9", 1..5),
            spaced in proptest::prelude::any::<bool>(),
        ) {
            let generated = format!("{}.{}{}", if spaced { " " } else { "" }, keys.join("."), if spaced { "\n" } else { "" });
            for code in [".a", ".id", ".data.id", ".a.b.i", " .data.a ", generated.as_str()] {
                let jq = Jq::compile(code).unwrap();
                proptest::prop_assert!(jq.fields.is_some(), "{}", code);
                let ours = jq.first(from_json(&value), &vars());
                let jaqs = jq.run(from_json(&value), &vars());
                let shown = |r: Result<Option<Val>, String>| r.map(|v| v.map(|v| to_json(&v)));
                proptest::prop_assert_eq!(shown(ours), shown(jaqs), "{} on {}", code, value);
            }
        }

        #[test]
        fn string_literals_answer_as_jaq_does(
            chars in proptest::collection::vec((proptest::prelude::any::<char>(), 0..4u8), 0..12),
            lone in proptest::option::of(0xd800u32..0xe000),
        ) {
            // The text written as JSON would allow: raw where it may be, else escaped
            // (`\uXXXX`, pairs above the BMP, the short escapes), now and then a lone
            // surrogate escape, which neither may accept.
            let mut code = String::from("\"");
            for (c, how) in &chars {
                match (c, how) {
                    ('"' | '\\', 0) => code.push_str(&format!("\\{c}")),
                    ('/', 1) => code.push_str("\\/"),
                    ('\n', 1) => code.push_str("\\n"),
                    ('\t', 1) => code.push_str("\\t"),
                    (c, 0) if *c >= ' ' && *c != '"' && *c != '\\' => code.push(*c),
                    (c, _) => {
                        let mut units = [0u16; 2];
                        for unit in c.encode_utf16(&mut units) {
                            code.push_str(&format!("\\u{unit:04x}"));
                        }
                    }
                }
            }
            if let Some(lone) = lone {
                code.push_str(&format!("\\u{lone:04x}"));
            }
            code.push('"');
            // A program jaq refuses (it takes no surrogate pair escapes) is refused
            // at load: nothing runs it.
            let Ok(jq) = Jq::compile(&code) else {
                return Ok(());
            };
            if lone.is_none() {
                proptest::prop_assert!(jq.is_constant(), "{}", code);
            }
            let ours = jq.first(Val::Null, &vars());
            let jaqs = jq.run(Val::Null, &vars());
            proptest::prop_assert_eq!(ours, jaqs, "{}", code);
        }

        #[test]
        fn programs_of_the_model_alone_give_jaqs_output_whatever_else_is_given(
            value in any_json(),
            id in proptest::option::of("\\PC{0,8}"),
            params in any_json(),
        ) {
            // What a plan builds once per model (`by_model`) must be what jaq gives for
            // any request of the model.
            let given = JqVars::new("sd_2.0_special", "seedance-2", MediaKind::Video, id.as_deref(), Some(from_json(&params)));
            let bare = JqVars::new("sd_2.0_special", "seedance-2", MediaKind::Video, None, None);
            for code in MODEL_ONLY {
                let jq = Jq::compile(code).unwrap();
                proptest::prop_assert!(jq.model_only(), "{}", code);
                let once = jq.run(Val::Null, &bare).map(|v| v.map(|v| to_json(&v)));
                let now = jq.run(from_json(&value), &given).map(|v| v.map(|v| to_json(&v)));
                proptest::prop_assert_eq!(once, now, "{}", code);
            }
        }

        #[test]
        fn merged_bodies_are_what_jaq_writes(
            fields in proptest::collection::btree_map("[ab]|model|prompt|id", any_json(), 0..5),
            big in proptest::prelude::any::<u64>(),
            models in proptest::collection::vec(("\\PC{0,8}", proptest::prelude::any::<bool>()), 1..3),
        ) {
            let mut input: serde_json::Map<String, Value> = fields.into_iter().collect();
            input.insert("big".into(), Value::from(big));
            for code in [
                "{model: $upstream_model} + .",
                "{model: $upstream_model, kind: $kind, a: [1, 2.5, null]} + .",
                "{a: $model} + {b: 1e3} + .",
                "({prompt: 1}, {b: 2}) + .",
                "null + .",
                "if $kind == \"video\" then {v: true} else null end + .",
            ] {
                // One program for several models: each model's own fields, kept apart.
                let jq = Jq::compile(code).unwrap();
                for (upstream, video) in &models {
                    let kind = if *video { MediaKind::Video } else { MediaKind::Image };
                    let vars = JqVars::new("m", upstream, kind, None, None);
                    let merged = jq.write_merged(&input, &vars);
                    proptest::prop_assert!(merged.is_some(), "{}", code);
                    let out = jq.run(from_json(&Value::Object(input.clone())), &vars).unwrap().unwrap();
                    let expected = serde_json::to_vec(&to_json(&out)).unwrap();
                    proptest::prop_assert_eq!(merged.unwrap(), expected, "{} for {}", code, upstream);
                }
            }
        }

        #[test]
        fn filled_templates_are_what_jaq_writes(
            model in "\\PC{0,12}|[a-z/%?&= ]{0,12}",
            id in proptest::option::of("\\PC{0,12}|[\\x00-\\x7f]{0,12}"),
        ) {
            let vars = JqVars::new(&model, "up/stream model", MediaKind::Image, id.as_deref(), None);
            for code in [
                r#""/v1/tasks/\($id | @uri)""#,
                r#""/m/\($model)/\t\u00e9\"/\($id)""#,
                r#""\($upstream_model | @uri)?x=\($kind)&m=\($model|@uri)""#,
            ] {
                let jq = Jq::compile(code).unwrap();
                proptest::prop_assert!(jq.template.is_some(), "{}", code);
                let ours = jq.fill(&vars);
                let jaqs = jq.run(Val::Null, &vars).unwrap().unwrap();
                match ours {
                    Some(ours) => proptest::prop_assert_eq!(Val::from(ours), jaqs, "{}", code),
                    // Only a variable that is not a string (no id) is left to jaq.
                    None => proptest::prop_assert!(id.is_none() && code.contains("$id")),
                }
            }
        }

        #[test]
        fn written_json_is_what_serde_json_writes(value in any_json()) {
            let v = from_json(&value);
            let expected = serde_json::to_vec(&to_json(&v)).unwrap();
            proptest::prop_assert_eq!(write_json(&v), expected);
        }
    }

    #[test]
    fn only_strings_of_text_and_variables_are_templates() {
        let template = |code| template(&syntax(code).unwrap());
        let pieces = template(r#""/t/\($id | @uri)?a=\n\($kind)""#).unwrap();
        assert_eq!(
            &*pieces,
            [
                Piece::Text("/t/".into()),
                Piece::Var {
                    index: 3,
                    uri: true
                },
                Piece::Text("?a=".into()),
                Piece::Text("\n".into()),
                Piece::Var {
                    index: 2,
                    uri: false
                },
            ]
        );
        for code in [
            r#""\(.id)""#,
            r#""\($id | ascii_downcase)""#,
            r#"@uri "\($id)""#,
            r#""\($id)" + "x""#,
            r#""a\($id, $model)""#,
        ] {
            assert!(template(code).is_none(), "{code}");
        }
        // A path of a query with no id (a submit's) is jaq's: `null` interpolated.
        let jq = Jq::compile(r#""/t/\($id)""#).unwrap();
        let vars = JqVars::new("m", "u", MediaKind::Video, None, None);
        assert_eq!(jq.json(Val::Null, &vars).unwrap(), json!("/t/null"));
    }

    #[test]
    fn merged_bodies_are_kept_apart_by_model() {
        let jq = Jq::compile("{model: $upstream_model, kind: $kind} + .").unwrap();
        let input = serde_json::Map::from_iter([("prompt".to_string(), json!("p"))]);
        for _ in 0..2 {
            for (model, kind) in [("a", MediaKind::Video), ("b", MediaKind::Image)] {
                let vars = JqVars::new("m", model, kind, None, None);
                let body = jq.write_merged(&input, &vars).unwrap();
                let expected = json!({"model": model, "kind": kind.as_str(), "prompt": "p"});
                assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), expected);
            }
        }
    }

    #[test]
    fn only_a_model_object_plus_the_input_is_merged_without_jaq() {
        let input = serde_json::Map::from_iter([("a".to_string(), json!(1))]);
        for code in [
            ".",
            ". + {model: $upstream_model}",
            "{model: .model} + .",
            "{a} + .",
            "{p: $params} + .",
            "{x: now} + .",
            "\"s\" + .",
            "{(1): 2} + .",
        ] {
            let jq = Jq::compile(code).unwrap();
            assert!(jq.write_merged(&input, &vars()).is_none(), "{code}");
        }
    }

    #[test]
    fn only_plain_field_reads_take_the_short_way() {
        for code in [
            ".", ".a[0]", ".a?", ".\"a b\"", "..", ".a | .b", ".1a", ".a.", "$id",
        ] {
            if let Ok(jq) = Jq::compile(code) {
                assert!(jq.fields.is_none(), "{code}");
            }
        }
    }

    #[test]
    fn values_json_has_no_word_for_are_written_as_to_json_writes_them() {
        for code in [
            "[nan, infinite, -infinite]",
            "{(1): 2, \"1\": 3, b: 1, a: {z: 1, y: [{}, []]}}",
            "{(null): 1, (true): [1.5, 1e400]}",
            "\"caf\\u00e9\\n\\u0001\"",
        ] {
            let v = Jq::compile(code)
                .unwrap()
                .run(Val::Null, &vars())
                .unwrap()
                .unwrap();
            let expected = serde_json::to_vec(&to_json(&v)).unwrap();
            assert_eq!(write_json(&v), expected, "{code}");
        }
    }

    #[test]
    fn compile_errors_say_what_is_wrong() {
        let e = Jq::compile("{a: .b").unwrap_err();
        assert!(e.contains("expected"), "{e}");
        let e = Jq::compile("$nope").unwrap_err();
        assert!(e.contains("undefined variable"), "{e}");
        let e = Jq::compile("frobnicate(1)").unwrap_err();
        assert!(e.contains("undefined filter"), "{e}");
    }

    #[test]
    fn runtime_errors_do_not_carry_upstream_values() {
        let jq = Jq::compile(".url.task_id").unwrap();
        let input =
            from_json(&json!({"url": "https://api.acme-internal.example/v1?key=sk-live-123"}));
        let e = jq.first(input, &vars()).unwrap_err();
        assert!(
            !e.contains("acme-internal") && !e.contains("sk-live"),
            "{e}"
        );
        assert!(e.contains("task_id"), "{e}");
    }

    #[test]
    fn escaped_quotes_stay_inside_their_value() {
        let secret = "sk-live-0123456789abcdef";
        let msg =
            format!(r#"cannot index "a \"quoted\" value with {secret} in it" with "task_id""#);
        let e = elide_values(&msg);
        assert!(!e.contains("sk-live"), "{e}");
        assert!(e.ends_with(r#"with "task_id""#), "{e}");
        // A short value with an escape is kept as it is.
        assert_eq!(elide_values(r#"x "a\"b" y"#), r#"x "a\"b" y"#);
        // Nothing of a long value is kept, not even its start.
        assert_eq!(elide_values(&format!(r#"v "{secret}""#)), r#"v "…""#);
        assert_eq!(elide_values(&format!(r#"cut "{secret}"#)), r#"cut "…"#);
    }

    #[test]
    fn programs_cannot_read_the_environment_or_end_the_process() {
        let e = Jq::compile("env").unwrap_err();
        assert!(e.contains("undefined filter `env`"), "{e}");
        let e = Jq::compile("$ENV.MEDIAGATE_TASK_SECRET").unwrap_err();
        assert!(e.contains("undefined variable"), "{e}");
        let e = Jq::compile(r#"{} | .x = env.HOME"#).unwrap_err();
        assert!(e.contains("env"), "{e}");
        // `halt` would exit the whole gateway through jaq's own unwrapping.
        for code in ["halt", "halt_error", "halt_error(1)"] {
            let jq = Jq::compile(code).unwrap();
            assert!(jq.first(Val::Null, &vars()).is_err(), "{code}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_before_parsing() {
        // Far deeper than any stack could take: must be an error, not an abort.
        let deep = "[".repeat(200_000);
        assert!(
            parse(deep.as_bytes())
                .unwrap_err()
                .contains("nested deeper")
        );
        let ok = format!("{}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(ok.as_bytes()).is_ok());
        // Brackets inside strings do not count.
        let s = format!("{{\"a\": \"{}\\\"{}\"}}", "[".repeat(500), "{".repeat(500));
        assert!(parse(s.as_bytes()).is_ok(), "{s}");
        // jaq's reader skips `#` comments: a quote in one opens no string, so the
        // nesting after it is counted; brackets in one are not.
        let hidden = format!("# \"\n{}{}", "[".repeat(200_000), "]".repeat(200_000));
        assert!(
            parse(hidden.as_bytes())
                .unwrap_err()
                .contains("nested deeper")
        );
        let commented = format!("# {}\n[1] # ]]\n", "[".repeat(500));
        assert_eq!(parse(commented.as_bytes()).unwrap(), from_json(&json!([1])));
    }

    #[test]
    fn numbers_survive_the_round_trip() {
        let v = json!({"i": 3, "f": 1.5, "big": 12345678901234u64, "neg": -2});
        let jq = Jq::compile(".").unwrap();
        assert_eq!(
            jq.json(parse(v.to_string().as_bytes()).unwrap(), &vars())
                .unwrap(),
            v
        );
        assert_eq!(jq.json(from_json(&v), &vars()).unwrap(), v);
    }
}
