//! Chat templates: the Jinja programs Hugging Face models ship to turn a conversation into
//! prompt text, rendered with minijinja the way `transformers` renders them.

use minijinja::{Environment, Error, ErrorKind, Value};
use serde::{Deserialize, Serialize};

use crate::error::LoadError;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the assistant.
    System,
    /// The person chatting.
    User,
    /// The model.
    Assistant,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// What was said.
    pub content: String,
}

impl Message {
    /// A message from `role`.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
        }
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

/// Why a conversation could not be rendered.
#[derive(Debug, thiserror::Error)]
#[error("chat template: {0}")]
pub struct TemplateError(String);

impl TemplateError {
    /// An error with this message.
    pub fn from_message(msg: impl Into<String>) -> Self {
        Self(msg.into())
    }
}

const NAME: &str = "chat";

impl ChatTemplate {
    /// Compiles `source` with the environment `transformers` uses: blocks trimmed,
    /// Python string methods, `raise_exception` and `strftime_now`.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, LoadError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |format: String| strftime_now(&format));
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| LoadError::Template(e.to_string()))?;
        Ok(Self {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        })
    }

    /// Renders a conversation; `add_generation_prompt` appends the assistant's header so
    /// that the model answers next.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| TemplateError(e.to_string()))?;
        template
            .render(minijinja::context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
            })
            .map_err(|e| {
                // The template's own `raise_exception` message is what the user must read.
                let mut msg = e.to_string();
                if let Some(detail) = e.detail() {
                    msg = format!("{msg}: {detail}");
                }
                TemplateError(msg)
            })
    }
}

/// Today's date in the few `strftime` codes chat templates use (Llama 3.x puts "Today
/// Date: 26 Jul 2024" in its system prompt).
fn strftime_now(format: &str) -> String {
    let days = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let name = MONTHS[(month - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year % 100)),
            Some('b') => out.push_str(&name[..3]),
            Some('B') => out.push_str(name),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Gregorian (year, month, day) of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2's template, as in the offline GGUF's `tokenizer.chat_template`.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn smollm2_template_renders_as_transformers_does() {
        let t = ChatTemplate::new(SMOLLM2, "<|im_start|>", "<|im_end|>").unwrap();
        let text = t.render(&[Message::new(Role::User, "Hi!")], true).unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn raise_exception_loop_controls_trim_blocks_and_python_methods() {
        let source = "{{ bos_token }}{% for m in messages %}\n  {% if m.role == 'system' %}{% continue %}{% endif %}\n  {% if m.role not in ['user', 'assistant'] %}{{ raise_exception('bad role ' + m.role) }}{% endif %}\n  [{{ m.role.upper() }}] {{ m.content.strip() }}\n  {% if loop.index >= 3 %}{% break %}{% endif %}\n{% endfor %}";
        let t = ChatTemplate::new(source, "<s>", "</s>").unwrap();
        let msgs = [
            Message::new(Role::System, "sys"),
            Message::new(Role::User, "  a  "),
            Message::new(Role::Assistant, "b"),
            Message::new(Role::User, "c"),
        ];
        // Expected output from Python's jinja2 with transformers' settings
        // (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, loopcontrols)).
        assert_eq!(
            t.render(&msgs, false).unwrap(),
            "<s>  [USER] a\n  [ASSISTANT] b\n"
        );

        let err = ChatTemplate::new(
            "{{ raise_exception('Conversation roles must alternate') }}",
            "",
            "",
        )
        .unwrap()
        .render(&msgs, false)
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("Conversation roles must alternate"),
            "{err}"
        );
    }

    #[test]
    fn strftime_now_formats_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_930), (2024, 7, 26));
        let today = strftime_now("%d %b %Y");
        assert_eq!(today.len(), 11, "{today}");
    }
}
