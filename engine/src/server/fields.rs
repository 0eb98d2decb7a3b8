//! Every field of OpenAI's chat and completions requests that the server does not honour
//! itself: accepted where it asks for nothing this server would do differently, refused
//! with a 400 `unsupported_parameter` naming it otherwise. Nothing is ignored silently: a
//! client that asks for a penalty, an audio answer or a stored completion learns that it
//! did not get one. A field OpenAI does not have is refused as OpenAI refuses it.
//!
//! The fields the server honours (`messages`, `prompt`, `temperature`, `response_format`,
//! ...) are [`super::api::CompletionBody`]'s own; `docs/server.md` lists them all.

use serde_json::Value;

use super::error::ApiError;

/// Labels for the caller's bookkeeping: they change nothing in the answer.
const LABELS: &[&str] = &[
    "user",
    "safety_identifier",
    "metadata",
    "prompt_cache_key",
    "service_tier",
];

/// Whether a field's value asks for nothing.
type AsksNothing = fn(&Value) -> bool;

/// Fields accepted at the value that asks for nothing (OpenAI's default), refused at any
/// other, with what they ask for.
const DEFAULT_ONLY: &[(&str, AsksNothing, &str)] = &[
    ("frequency_penalty", is_zero, "frequency penalties"),
    ("presence_penalty", is_zero, "presence penalties"),
    ("logit_bias", is_empty, "logit biases"),
    ("top_logprobs", is_zero, "log probabilities"),
    ("best_of", is_one, "best-of sampling"),
    ("suffix", is_empty, "suffixes (insertion)"),
    ("tool_choice", is_no_tool, "tools"),
    ("parallel_tool_calls", Value::is_boolean, "tools"),
    ("functions", is_empty, "functions"),
    ("modalities", is_text_only, "answers other than text"),
    ("store", is_false, "stored completions"),
];

/// OpenAI fields refused at any value.
const REFUSED: &[(&str, &str)] = &[
    ("function_call", "functions"),
    ("audio", "audio answers"),
    ("prediction", "predicted outputs"),
    ("reasoning_effort", "reasoning effort"),
    ("verbosity", "verbosity"),
    ("web_search_options", "web search"),
];

fn is_zero(v: &Value) -> bool {
    v.as_f64() == Some(0.0)
}

fn is_one(v: &Value) -> bool {
    v.as_f64() == Some(1.0)
}

fn is_false(v: &Value) -> bool {
    v == &Value::Bool(false)
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

fn is_no_tool(v: &Value) -> bool {
    matches!(v.as_str(), Some("none" | "auto"))
}

fn is_text_only(v: &Value) -> bool {
    v.as_array()
        .is_some_and(|m| m.iter().all(|x| x.as_str() == Some("text")))
}

/// Checks the fields [`super::api::CompletionBody`] does not hold itself. A `null` is the
/// field left out.
pub fn check_others<'a>(
    others: impl IntoIterator<Item = (&'a String, &'a Value)>,
) -> Result<(), ApiError> {
    for (name, value) in others {
        if value.is_null() || LABELS.contains(&name.as_str()) {
            continue;
        }
        if let Some((_, accepted, what)) = DEFAULT_ONLY.iter().find(|(n, ..)| n == name) {
            if accepted(value) {
                continue;
            }
            return Err(ApiError::unsupported(
                format!("{what} are not supported by this server (`{name}` = {value})"),
                name,
            ));
        }
        if let Some((_, what)) = REFUSED.iter().find(|(n, _)| n == name) {
            return Err(ApiError::unsupported(
                format!("{what} are not supported by this server (`{name}`)"),
                name,
            ));
        }
        return Err(ApiError::unsupported(
            format!("Unrecognized request argument supplied: {name}"),
            name,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map};

    fn check(body: Value) -> Result<(), ApiError> {
        let map: Map<String, Value> = body.as_object().unwrap().clone();
        check_others(map.iter())
    }

    #[test]
    fn defaults_and_labels_pass_and_anything_asked_for_is_refused_by_name() {
        let fine = json!({
            "user": "u1", "metadata": {"a": "b"}, "service_tier": "auto",
            "frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {},
            "top_logprobs": 0, "best_of": 1, "suffix": "", "tool_choice": "none",
            "parallel_tool_calls": true, "functions": [], "modalities": ["text"],
            "store": false, "audio": null,
        });
        assert!(check(fine).is_ok());
        for (body, param) in [
            (json!({"frequency_penalty": 0.5}), "frequency_penalty"),
            (json!({"logit_bias": {"50256": -100}}), "logit_bias"),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (json!({"modalities": ["text", "audio"]}), "modalities"),
            (json!({"store": true}), "store"),
            (json!({"audio": {"voice": "alloy"}}), "audio"),
            (json!({"reasoning_effort": "low"}), "reasoning_effort"),
            (json!({"temprature": 0}), "temprature"),
        ] {
            let e = check(body).expect_err(param);
            assert_eq!(e.param.as_deref(), Some(param));
            assert_eq!(e.code, Some("unsupported_parameter"));
        }
    }
}
