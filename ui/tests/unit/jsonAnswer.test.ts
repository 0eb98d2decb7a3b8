import { describe, expect, it } from "vitest";
import { parseJsonAnswer, summary } from "../../src/lib/jsonAnswer";

describe("JSON answers", () => {
  it("takes an answer whose whole text is an object or array", () => {
    expect(parseJsonAnswer(' {"a": [1, 2], "b": {"c": null}} \n')).toEqual({ a: [1, 2], b: { c: null } });
    expect(parseJsonAnswer("[1, 2]")).toEqual([1, 2]);
  });

  it("leaves prose, scalars and JSON cut by the token limit to Markdown", () => {
    expect(parseJsonAnswer("The capital of France is Paris.")).toBeNull();
    expect(parseJsonAnswer("42")).toBeNull();
    expect(parseJsonAnswer('"a string"')).toBeNull();
    expect(parseJsonAnswer('{"parties": [{"name": "Ada')).toBeNull();
    expect(parseJsonAnswer('Here it is: {"a": 1}')).toBeNull();
    expect(parseJsonAnswer("{not json}")).toBeNull();
  });

  it("summarizes a collapsed node", () => {
    expect(summary({ a: 1, b: 2 })).toBe("{2 keys}");
    expect(summary({ a: 1 })).toBe("{1 key}");
    expect(summary([1])).toBe("[1 item]");
    expect(summary([])).toBe("[0 items]");
  });
});
