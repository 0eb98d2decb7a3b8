/** Answers asked for as JSON: an answer whose whole text is a JSON object or array is shown
 * as a tree. Anything else (prose, JSON cut by the token limit) stays Markdown. */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The answer's JSON value when its whole text is one object or array, else `null`. */
export function parseJsonAnswer(content: string): Json[] | { [key: string]: Json } | null {
  const text = content.trim();
  if (!(text.startsWith("{") && text.endsWith("}")) && !(text.startsWith("[") && text.endsWith("]"))) return null;
  try {
    const value = JSON.parse(text) as Json;
    return value !== null && typeof value === "object" ? value : null;
  } catch {
    return null;
  }
}

/** What a collapsed object or array shows: `{3 keys}`, `[2 items]`. */
export function summary(value: Json[] | { [key: string]: Json }): string {
  if (Array.isArray(value)) return `[${value.length} ${value.length === 1 ? "item" : "items"}]`;
  const n = Object.keys(value).length;
  return `{${n} ${n === 1 ? "key" : "keys"}}`;
}
