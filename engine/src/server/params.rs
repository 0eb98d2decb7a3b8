//! From a request body to an engine [`Request`]: JSON parsing with the offending field
//! named, and every field checked against what the engine can do.

use serde_json::Value;

use super::api::{ChatMessage, CompletionBody};
use super::error::ApiError;
use crate::cache::{CacheConfig, ConfigError, KiviConfig};
use crate::grammar::OutputFormat;
use crate::sampling::SamplingParams;
use crate::session::{Prompt, Request};
use crate::tokenizer::{Message, Role};
use kivi_kernels::Rotation;

/// Which endpoint a body came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
}

impl Endpoint {
    /// The field that holds the prompt, for errors about it.
    pub fn prompt_param(self) -> &'static str {
        match self {
            Endpoint::Chat => "messages",
            Endpoint::Completions => "prompt",
        }
    }
}

/// Most stop sequences a request may give (OpenAI's limit).
pub const MAX_STOPS: usize = 4;

/// Default `max_tokens` of `/v1/completions` (OpenAI's); chat runs until the model stops
/// or the context is full.
pub const DEFAULT_COMPLETION_TOKENS: usize = 16;

/// A checked request.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// What the engine runs.
    pub request: Request,
    /// Answer with server-sent events.
    pub stream: bool,
    /// Streaming: end with a usage chunk.
    pub include_usage: bool,
    /// Stop sequences (the output is cut before the first match).
    pub stops: Vec<String>,
}

/// Parses a JSON body; errors name the field at fault.
pub fn parse_body(bytes: &[u8]) -> Result<CompletionBody, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            "The request body is empty: send a JSON object (Content-Type: application/json)",
            None,
        ));
    }
    // A struct would also deserialize from an array; say what is wrong instead.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::invalid(
            "The request body must be a JSON object",
            None,
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let body: CompletionBody = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_data() {
            let param = (path != ".").then_some(path.as_str());
            let at = param.map_or(String::new(), |p| format!(" in `{p}`"));
            ApiError::invalid(format!("Invalid value{at}: {inner}"), param)
        } else {
            ApiError::invalid(
                format!("We could not parse the JSON body of your request: {inner}"),
                None,
            )
        }
    })?;
    de.end().map_err(|e| {
        ApiError::invalid(
            format!("We could not parse the JSON body of your request: {e}"),
            None,
        )
    })?;
    Ok(body)
}

/// Checks a parsed body and builds the engine request. `model_id` is the served model,
/// `context_length` the engine's window (chat's default `max_tokens`).
pub fn plan(
    mut body: CompletionBody,
    endpoint: Endpoint,
    model_id: &str,
    context_length: usize,
) -> Result<Plan, ApiError> {
    if let Some(model) = &body.model {
        if model != model_id {
            return Err(ApiError::model_not_found(model, model_id));
        }
    }
    let prompt = match endpoint {
        Endpoint::Chat => {
            let messages = body.messages.take().ok_or_else(|| {
                ApiError::invalid("Missing required parameter: 'messages'", Some("messages"))
            })?;
            Prompt::Chat {
                messages: chat_messages(messages)?,
                documents: Vec::new(),
            }
        }
        Endpoint::Completions => {
            let prompt = body.prompt.take().ok_or_else(|| {
                ApiError::invalid("Missing required parameter: 'prompt'", Some("prompt"))
            })?;
            Prompt::Text(text_prompt(prompt)?)
        }
    };
    super::fields::check_others(&body.others)?;
    if let Some(n) = body.n {
        if n != 1 {
            return Err(ApiError::unsupported(
                format!("n = {n} is not supported: this server makes one choice per request"),
                "n",
            ));
        }
    }
    match &body.logprobs {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Number(n)) if n.as_u64() == Some(0) => {}
        Some(_) => {
            return Err(ApiError::unsupported(
                "logprobs are not supported by this server",
                "logprobs",
            ))
        }
    }
    if body.echo == Some(true) {
        return Err(ApiError::unsupported(
            "echo is not supported by this server",
            "echo",
        ));
    }
    match &body.tools {
        None => {}
        Some(Value::Array(tools)) if tools.is_empty() => {}
        Some(_) => {
            return Err(ApiError::unsupported(
                "tools are not supported by this server",
                "tools",
            ))
        }
    }
    let max_tokens = match (body.max_completion_tokens, body.max_tokens) {
        (Some(0), _) => return Err(at_least_one("max_completion_tokens")),
        (None, Some(0)) => return Err(at_least_one("max_tokens")),
        (Some(n), _) | (None, Some(n)) => usize::try_from(n).unwrap_or(usize::MAX),
        (None, None) => match endpoint {
            Endpoint::Chat => context_length,
            Endpoint::Completions => DEFAULT_COMPLETION_TOKENS,
        },
    };
    let sampling = sampling(&body)?;
    let stops = stops(body.stop)?;
    let cache = body.kv_cache.map(kv_cache).transpose()?;
    let format = response_format(body.response_format)?;
    let stream = body.stream.unwrap_or(false);
    let include_usage = stream
        && body
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
    Ok(Plan {
        request: Request {
            prompt,
            sampling,
            max_tokens,
            cache,
            format,
        },
        stream,
        include_usage,
        stops,
    })
}

/// `response_format`: `{"type": "text"}` (the default), `{"type": "json_object"}`, or
/// `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`. Both JSON kinds
/// are kept to by constrained decoding, `strict` or not; a schema the grammar engine
/// refuses comes back as a 400 on `response_format` before the prompt is read.
fn response_format(value: Option<Value>) -> Result<Option<OutputFormat>, ApiError> {
    const PARAM: &str = "response_format";
    let Some(value) = value else {
        return Ok(None);
    };
    let kind = value.get("type").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid(
            "`response_format` must be an object with a `type`: \"text\", \"json_object\" or \"json_schema\"",
            Some(PARAM),
        )
    })?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(OutputFormat::JsonObject)),
        "json_schema" => {
            let spec = value.get("json_schema").ok_or_else(|| {
                ApiError::invalid(
                    "Missing required parameter: 'response_format.json_schema'",
                    Some("response_format.json_schema"),
                )
            })?;
            match spec.get("schema") {
                None => Ok(Some(OutputFormat::JsonObject)),
                Some(schema) if schema.is_object() => Ok(Some(OutputFormat::JsonSchema {
                    schema: schema.clone(),
                })),
                Some(_) => Err(ApiError::invalid(
                    "`response_format.json_schema.schema` must be a JSON object",
                    Some("response_format.json_schema.schema"),
                )),
            }
        }
        other => Err(ApiError::invalid(
            format!(
                "Invalid value for `response_format.type`: {other:?} (expected \"text\", \"json_object\" or \"json_schema\")"
            ),
            Some("response_format.type"),
        )),
    }
}

fn at_least_one(param: &str) -> ApiError {
    ApiError::invalid(format!("`{param}` must be at least 1"), Some(param))
}

fn sampling(body: &CompletionBody) -> Result<SamplingParams, ApiError> {
    let temperature = body.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            format!("`temperature` must be between 0 and 2, not {temperature}"),
            Some("temperature"),
        ));
    }
    let top_p = body.top_p.unwrap_or(1.0);
    if !(0.0..=1.0).contains(&top_p) {
        return Err(ApiError::invalid(
            format!("`top_p` must be between 0 and 1, not {top_p}"),
            Some("top_p"),
        ));
    }
    let top_k = match body.top_k {
        None | Some(0) | Some(-1) => 0,
        Some(k) if k > 0 => k as usize,
        Some(k) => {
            return Err(ApiError::invalid(
                format!("`top_k` must be a positive number, or 0 or -1 to turn it off, not {k}"),
                Some("top_k"),
            ))
        }
    };
    let repetition_penalty = body.repetition_penalty.unwrap_or(1.0);
    if !(repetition_penalty > 0.0 && repetition_penalty.is_finite()) {
        return Err(ApiError::invalid(
            format!(
                "`repetition_penalty` must be greater than 0 (1 turns it off), not \
                 {repetition_penalty}"
            ),
            Some("repetition_penalty"),
        ));
    }
    Ok(SamplingParams {
        temperature,
        top_p,
        top_k,
        repetition_penalty,
        // Negative seeds are valid in OpenAI's API; any 64 bits make a seed.
        seed: body.seed.map(|s| s as u64),
        ..SamplingParams::default()
    })
}

fn chat_messages(messages: Vec<ChatMessage>) -> Result<Vec<Message>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid(
            "`messages` must hold at least one message",
            Some("messages"),
        ));
    }
    messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let role = match m.role.as_str() {
                "system" | "developer" => Role::System,
                "user" => Role::User,
                "assistant" => Role::Assistant,
                "tool" | "function" => {
                    return Err(ApiError::unsupported(
                        format!("messages with role `{}` are not supported", m.role),
                        &format!("messages[{i}].role"),
                    ))
                }
                other => {
                    return Err(ApiError::invalid(
                        format!(
                            "Invalid role `{other}`: expected `system`, `developer`, `user` \
                             or `assistant`"
                        ),
                        Some(&format!("messages[{i}].role")),
                    ))
                }
            };
            match &m.tool_calls {
                None => {}
                Some(Value::Array(calls)) if calls.is_empty() => {}
                Some(_) => {
                    return Err(ApiError::unsupported(
                        "tool calls are not supported by this server",
                        &format!("messages[{i}].tool_calls"),
                    ))
                }
            }
            let param = format!("messages[{i}].content");
            let content = match m.content {
                Some(Value::String(s)) => s,
                Some(Value::Array(parts)) => text_parts(parts, &param)?,
                None if role == Role::Assistant => String::new(),
                None => {
                    return Err(ApiError::invalid(
                        format!("Missing required parameter: '{param}'"),
                        Some(&param),
                    ))
                }
                Some(other) => {
                    return Err(ApiError::invalid(
                        format!(
                            "Invalid type for '{param}': expected a string or an array of \
                             text parts, got {}",
                            type_name(&other)
                        ),
                        Some(&param),
                    ))
                }
            };
            Ok(Message::new(role, content))
        })
        .collect()
}

/// The text of `[{type: "text", text}, ...]`, parts joined by newlines.
fn text_parts(parts: Vec<Value>, param: &str) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let text = match (part.get("type").and_then(Value::as_str), part.get("text")) {
            (Some("text"), Some(Value::String(text))) => text,
            (Some(kind), _) if kind != "text" => {
                return Err(ApiError::unsupported(
                    format!("content parts of type `{kind}` are not supported: send text"),
                    &format!("{param}[{j}].type"),
                ))
            }
            _ => {
                return Err(ApiError::invalid(
                    "Each content part must be {\"type\": \"text\", \"text\": \"...\"}",
                    Some(&format!("{param}[{j}]")),
                ))
            }
        };
        texts.push(text.as_str());
    }
    Ok(texts.join("\n"))
}

fn text_prompt(prompt: Value) -> Result<String, ApiError> {
    let bad = |what: &str| {
        ApiError::invalid(
            format!("Invalid 'prompt': expected a string, got {what}"),
            Some("prompt"),
        )
    };
    match prompt {
        Value::String(s) => Ok(s),
        Value::Array(mut items) => match items.as_slice() {
            [Value::String(_)] => match items.pop() {
                Some(Value::String(s)) => Ok(s),
                _ => unreachable!("matched one string"),
            },
            [Value::String(_), ..] => Err(ApiError::unsupported(
                "Only one prompt per request is supported",
                "prompt",
            )),
            [Value::Number(_), ..] | [Value::Array(_), ..] => Err(ApiError::unsupported(
                "Token-id prompts are not supported: send text",
                "prompt",
            )),
            _ => Err(bad("an empty array or an array of non-strings")),
        },
        other => Err(bad(type_name(&other))),
    }
}

fn stops(stop: Option<Value>) -> Result<Vec<String>, ApiError> {
    let bad = |message: String| ApiError::invalid(message, Some("stop"));
    let list = match stop {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::String(s) => Ok(s),
                other => Err(bad(format!(
                    "Invalid 'stop': expected strings, got {}",
                    type_name(&other)
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(bad(format!(
                "Invalid 'stop': expected a string or an array of strings, got {}",
                type_name(&other)
            )))
        }
    };
    if list.len() > MAX_STOPS {
        return Err(bad(format!(
            "Invalid 'stop': at most {MAX_STOPS} stop sequences, got {}",
            list.len()
        )));
    }
    if list.iter().any(String::is_empty) {
        return Err(bad(
            "Invalid 'stop': stop sequences must not be empty".into()
        ));
    }
    let mut unique: Vec<String> = Vec::with_capacity(list.len());
    for s in list {
        if !unique.contains(&s) {
            unique.push(s);
        }
    }
    Ok(unique)
}

/// The `kv_cache` extension: `"full"`, a short name (`"k2v2-g32-r128"`,
/// `"k2v2-g32-r128-s4-rot"`), or an object `{k_bits, v_bits, group_size, residual_length,
/// sinks, rotation}` whose missing fields take KIVI's defaults (2, 2, 32, 128, 0, "none";
/// `rotation` is "none", "keys", "values" or "both").
pub fn kv_cache(value: Value) -> Result<CacheConfig, ApiError> {
    const PARAM: &str = "kv_cache";
    let config_error = |e: ConfigError| {
        let field = match &e {
            ConfigError::Bits { which: "key", .. } => "kv_cache.k_bits",
            ConfigError::Bits { .. } => "kv_cache.v_bits",
            ConfigError::GroupSize(_) => "kv_cache.group_size",
            ConfigError::Residual { .. } => "kv_cache.residual_length",
            ConfigError::Sinks { .. } => "kv_cache.sinks",
            ConfigError::Syntax(_) => PARAM,
        };
        ApiError::invalid(format!("Invalid 'kv_cache': {e}"), Some(field))
    };
    match value {
        Value::String(s) => s.parse::<CacheConfig>().map_err(config_error),
        Value::Object(fields) => {
            let defaults = KiviConfig::default();
            let (mut k, mut v, mut g, mut r, mut sinks) = (
                defaults.key_bits() as u64,
                defaults.value_bits() as u64,
                defaults.group_size() as u64,
                defaults.residual_length() as u64,
                0u64,
            );
            let mut rotation = Rotation::None;
            for (name, value) in &fields {
                let slot = match name.as_str() {
                    "k_bits" => &mut k,
                    "v_bits" => &mut v,
                    "group_size" => &mut g,
                    "residual_length" => &mut r,
                    "sinks" => &mut sinks,
                    "rotation" => {
                        rotation =
                            match value.as_str() {
                                Some("none") => Rotation::None,
                                Some("keys") => Rotation::Keys,
                                Some("values") => Rotation::Values,
                                Some("both") => Rotation::Both,
                                Some("adaptive") => Rotation::Adaptive,
                                _ => return Err(ApiError::invalid(
                                    "Invalid 'kv_cache.rotation': expected \"none\", \"keys\", \
                                     \"values\", \"both\" or \"adaptive\""
                                        .to_string(),
                                    Some(&format!("{PARAM}.rotation")),
                                )),
                            };
                        continue;
                    }
                    _ => {
                        return Err(ApiError::invalid(
                            format!(
                                "Unknown field `{name}` in 'kv_cache': expected k_bits, v_bits, \
                                 group_size, residual_length, sinks and rotation"
                            ),
                            Some(&format!("{PARAM}.{name}")),
                        ))
                    }
                };
                *slot = value.as_u64().ok_or_else(|| {
                    ApiError::invalid(
                        format!(
                            "Invalid 'kv_cache.{name}': expected a non-negative integer, got {}",
                            type_name(value)
                        ),
                        Some(&format!("{PARAM}.{name}")),
                    )
                })?;
            }
            let bits = |b: u64| u32::try_from(b).unwrap_or(u32::MAX);
            let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
            KiviConfig::new(bits(k), bits(v), size(g), size(r))
                .and_then(|c| c.with_sinks(size(sinks)))
                .map(|c| CacheConfig::Kivi(c.with_rotation(rotation)))
                .map_err(config_error)
        }
        other => Err(ApiError::invalid(
            format!(
                "Invalid 'kv_cache': expected \"full\", a name like \"k2v2-g32-r128\" or an \
                 object {{k_bits, v_bits, group_size, residual_length}}, got {}",
                type_name(&other)
            ),
            Some(PARAM),
        )),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chat(body: Value) -> Result<Plan, ApiError> {
        let body = parse_body(body.to_string().as_bytes())?;
        plan(body, Endpoint::Chat, "smol", 8192)
    }

    fn hi() -> Value {
        json!([{"role": "user", "content": "Hi"}])
    }

    #[test]
    fn a_minimal_chat_request_gets_openais_defaults() {
        let plan = chat(json!({"model": "smol", "messages": hi()})).unwrap();
        assert!(!plan.stream && !plan.include_usage && plan.stops.is_empty());
        assert_eq!(plan.request.max_tokens, 8192);
        assert_eq!(plan.request.sampling.temperature, 1.0);
        assert_eq!(plan.request.sampling.repetition_penalty, 1.0);
        assert_eq!(plan.request.cache, None);
        let Prompt::Chat { messages, .. } = plan.request.prompt else {
            panic!("a chat prompt")
        };
        assert_eq!(messages, vec![Message::new(Role::User, "Hi")]);
    }

    #[test]
    fn fields_map_onto_the_engine_request() {
        let plan = chat(json!({
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": null},
            ],
            "temperature": 0, "top_p": 0.5, "top_k": -1, "seed": -1,
            "max_tokens": 9, "max_completion_tokens": 5, "stop": ["\n", "\n", "END"],
            "stream": true, "stream_options": {"include_usage": true},
            "kv_cache": {"k_bits": 4, "residual_length": 64}, "user": "ignored",
        }))
        .unwrap();
        assert!(plan.stream && plan.include_usage);
        assert_eq!(plan.stops, vec!["\n".to_string(), "END".into()]);
        let r = plan.request;
        assert_eq!(r.max_tokens, 5);
        assert_eq!(r.sampling.temperature, 0.0);
        assert_eq!(r.sampling.top_p, 0.5);
        assert_eq!(r.sampling.top_k, 0);
        assert_eq!(r.sampling.seed, Some(u64::MAX));
        assert_eq!(r.cache.unwrap().to_string(), "k4v2-g32-r64");
        let Prompt::Chat { messages, .. } = r.prompt else {
            panic!("a chat prompt")
        };
        assert_eq!(messages[0], Message::new(Role::System, "Be brief."));
        assert_eq!(messages[1].content, "a\nb");
        assert_eq!(messages[2], Message::new(Role::Assistant, ""));
    }

    #[test]
    fn completions_take_one_string_and_default_to_16_tokens() {
        let body = parse_body(br#"{"prompt": ["Once upon"], "kv_cache": "full"}"#).unwrap();
        let plan = plan(body, Endpoint::Completions, "smol", 8192).unwrap();
        assert_eq!(plan.request.prompt, Prompt::Text("Once upon".into()));
        assert_eq!(plan.request.max_tokens, DEFAULT_COMPLETION_TOKENS);
        assert_eq!(plan.request.cache, Some(CacheConfig::Full));
        let body = parse_body(br#"{"prompt": ["a", "b"]}"#).unwrap();
        let err = super::plan(body, Endpoint::Completions, "smol", 8192).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("prompt"));
        let body = parse_body(br#"{"messages": []}"#).unwrap();
        let err = super::plan(body, Endpoint::Completions, "smol", 8192).unwrap_err();
        assert_eq!(err.message, "Missing required parameter: 'prompt'");
    }

    /// (body, expected param) for requests that must be refused with a 400.
    #[test]
    fn bad_requests_name_the_field() {
        let cases: Vec<(&str, Option<&str>)> = vec![
            ("{not json", None),
            ("[1, 2]", None),
            (r#"{"messages": []} trailing"#, None),
            (r#"{"messages": "hi"}"#, Some("messages")),
            (
                r#"{"messages": [{"role": "user", "content": 5}]}"#,
                Some("messages[0].content"),
            ),
            (r#"{"messages": [{"content": "x"}]}"#, Some("messages[0]")),
            (
                r#"{"messages": [{"role": "robot", "content": "x"}]}"#,
                Some("messages[0].role"),
            ),
            (
                r#"{"messages": [{"role": "tool", "content": "x"}]}"#,
                Some("messages[0].role"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
                Some("messages[0].content[0].type"),
            ),
            (r#"{"messages": []}"#, Some("messages")),
            (r#"{}"#, Some("messages")),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}"#,
                Some("temperature"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "temperature": 3}"#,
                Some("temperature"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "top_p": 1.5}"#,
                Some("top_p"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}"#,
                Some("max_tokens"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}"#,
                Some("max_tokens"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}"#,
                Some("max_completion_tokens"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}"#,
                Some("stream"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "stop": 5}"#,
                Some("stop"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "stop": ["a","b","c","d","e"]}"#,
                Some("stop"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "stop": [""]}"#,
                Some("stop"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "n": 2}"#,
                Some("n"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "logprobs": true}"#,
                Some("logprobs"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "seed": 1.5}"#,
                Some("seed"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "kv_cache": {"k_bits": 3}}"#,
                Some("kv_cache.k_bits"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "kv_cache": {"v_bits": 8}}"#,
                Some("kv_cache.v_bits"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "kv_cache": {"group_size": 48}}"#,
                Some("kv_cache.group_size"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "kv_cache": {"group_size": 64, "residual_length": 100}}"#,
                Some("kv_cache.residual_length"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "kv_cache": {"bits": 2}}"#,
                Some("kv_cache.bits"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "kv_cache": {"k_bits": "2"}}"#,
                Some("kv_cache.k_bits"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "kv_cache": "k3v2"}"#,
                Some("kv_cache.k_bits"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "kv_cache": "q8"}"#,
                Some("kv_cache"),
            ),
            (
                r#"{"messages": [{"role": "user", "content": "x"}], "kv_cache": 4}"#,
                Some("kv_cache"),
            ),
        ];
        for (body, param) in cases {
            let err = parse_body(body.as_bytes())
                .and_then(|b| plan(b, Endpoint::Chat, "smol", 8192))
                .unwrap_err();
            assert_eq!(
                err.status,
                axum::http::StatusCode::BAD_REQUEST,
                "{body}: {err:?}"
            );
            assert_eq!(err.kind, "invalid_request_error", "{body}");
            assert_eq!(err.param.as_deref(), param, "{body}: {}", err.message);
        }
    }

    #[test]
    fn an_unknown_model_is_a_404() {
        let err = chat(json!({"model": "gpt-4o", "messages": hi()})).unwrap_err();
        assert_eq!(err.status, axum::http::StatusCode::NOT_FOUND);
        assert_eq!(err.code, Some("model_not_found"));
        assert!(err.message.contains("`smol`"), "{}", err.message);
    }

    #[test]
    fn residual_errors_say_what_is_allowed() {
        let err = kv_cache(json!({"group_size": 32, "residual_length": 40})).unwrap_err();
        assert_eq!(
            err.message,
            "Invalid 'kv_cache': residual length must be a multiple of the group size 32 \
             (0, 32, 64, ...), not 40"
        );
    }

    #[test]
    fn kivi_plus_is_asked_for_by_name_or_by_fields() {
        let by_name = kv_cache(json!("k2v2-g32-r128-s4-rot")).unwrap();
        let by_fields = kv_cache(json!({"sinks": 4, "rotation": "both"})).unwrap();
        assert_eq!(by_name, by_fields);
        assert_eq!(by_name.to_string(), "k2v2-g32-r128-s4-rot");
        let err = kv_cache(json!({"rotation": "sideways"})).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("kv_cache.rotation"));
        let err = kv_cache(json!({"sinks": 1000})).unwrap_err();
        assert_eq!(
            err.param.as_deref(),
            Some("kv_cache.sinks"),
            "{}",
            err.message
        );
    }
}
