#!/usr/bin/env python3
"""Render extra chat-template golden cases with Jinja2, the way HF transformers renders them.

tests/fixtures/chat/chat_templates.json (copied from ../shared/fixtures/chat) holds the Llama 3 and
Qwen3 templates with a few plain conversations. The native renderers in include/strata/chat/ also
handle what those cases leave out: Qwen3 reasoning in earlier and current assistant turns,
`reasoning_content`, tool results, system messages not first, content needing trim; and the Llama 4
template (tests/fixtures/chat/llama4_template.jinja, the chat_template of HF transformers'
models/llama4/processing_llama4.py, which is also what Llama-4-Scout/Maverick ship). This script
renders those conversations with the real template texts and writes
tests/fixtures/chat/chat_extra.json in the same layout as chat_templates.json:

  { "<family>": { "template": "...", "cases": { "<name>/agp=<0|1>[/enable_thinking=0]":
        { "messages": [...], "add_generation_prompt": bool, ["enable_thinking": bool,] "rendered": "..." } } } }

The environment matches transformers' chat-template renderer: ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols, and `tojson` replaced by json.dumps(ensure_ascii=False).
Before writing, every case of chat_templates.json is re-rendered and must match byte for byte, which
checks that this environment is the one that produced the shared fixture.

It also writes tests/fixtures/chat/chat_tools.json: tool definitions, assistant tool calls and tool
results through the Qwen3, Llama 3.1 (text from apps/mkmodel/chat_templates.cpp, Meta's
Llama-3.1-8B-Instruct template) and Llama 4 templates. Each case stores the conversation as the C++
side holds it (tool call arguments as JSON text) plus "tools" and "tools_in_user_message"; the
rendering passes Qwen3 the arguments as the string a client sends, the Llama templates the parsed
object (as llama.cpp does for templates that need object arguments).

Usage (from the repository root; needs Jinja2):
    python3 tools/gen_chat_goldens.py
"""
import json
import os
import re
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "chat")
BOS = "<|begin_of_text|>"


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    return env


def render(env, template, messages, agp, enable_thinking=None):
    kw = dict(messages=messages, add_generation_prompt=agp, bos_token=BOS, eos_token="")
    if enable_thinking is not None:
        kw["enable_thinking"] = enable_thinking
    return env.from_string(template).render(**kw)


def U(c):
    return {"role": "user", "content": c}


def A(c, reasoning=None):
    m = {"role": "assistant", "content": c}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    return m


def S(c):
    return {"role": "system", "content": c}


def T(c):
    return {"role": "tool", "content": c}


# (name, messages, add_generation_prompt values, also render enable_thinking=false)
QWEN3 = [
    ("history_reasoning_stripped",
     [U("What is 2+2?"), A("<think>\nAdd the numbers.\n</think>\n\n4"), U("And 3+3?")], [True, False], True),
    ("last_assistant_keeps_reasoning",
     [U("What is 2+2?"), A("<think>\nAdd the numbers.\n</think>\n\n4")], [False], False),
    ("last_assistant_no_reasoning",
     [U("Hi"), A("Hello.")], [False], False),
    ("reasoning_content_field_last",
     [U("Hi"), A("Hello.", reasoning="\nThe user greets me.\n")], [True, False], False),
    ("reasoning_content_field_history",
     [U("Hi"), A("Hello.", reasoning="The user greets me."), U("Bye")], [True], False),
    ("reasoning_content_empty_keeps_tags",
     [U("Hi"), A("<think>x</think>Hello.", reasoning="")], [False], False),
    ("think_split_newlines",
     [U("Q"), A("\n\n<think>\n\nfirst\n\n</think>\n\n\nanswer\n")], [False], False),
    ("think_nested_tags",
     [U("Q"), A("pre<think>a<think>b</think>mid</think>tail")], [False], False),
    ("think_without_open_tag",
     [U("Q"), A("just reasoning</think>answer"), U("Again")], [True], False),
    ("tool_round_trip",
     [S("You can call tools."), U("Weather in Paris?"),
      A("<think>\nNeed the weather tool.\n</think>\n\nLet me check."),
      T("{\"temp\": 22}"), T("sunny"),
      A("<think>\nGot it.\n</think>\n\nIt is 22C and sunny.")], [True, False], True),
    ("tool_then_plain_assistant_not_last",
     [U("Weather?"), A("Checking."), T("rain"), A("It rains.")], [True], False),
    ("tool_response_user_is_not_a_query",
     [U("Weather?"), A("<think>\nr1\n</think>\n\nChecking."),
      U("<tool_response>\nrain\n</tool_response>"), A("<think>\nr2\n</think>\n\nIt rains.")], [False], False),
    ("tool_first",
     [T("orphan result"), U("ok?")], [True], False),
    ("system_not_first",
     [U("Hi"), S("Be brief."), U("Explain gravity.")], [True], False),
    ("system_only",
     [S("You are a bot.")], [True, False], True),
    ("whitespace_untouched",
     [S("  spaced system \n"), U("\n  spaced user  \n")], [True], False),
    ("assistant_last_agp",
     [U("Hi"), A("Hello.")], [True], True),
    ("no_user_message",
     [S("sys"), A("<think>\nr\n</think>\n\nx")], [True, False], False),
]

LLAMA3 = [
    ("trim_ascii",
     [S("  Be kind. \n"), U("\t\n Hi there \r\n")], [True], False),
    ("trim_unicode_whitespace",
     [U("\u3000\u00a0 Bonjour \u2009\u0085\u2028")], [True], False),
    ("no_trim_inner",
     [U("line one\n\n  line two")], [True], False),
    ("system_not_first",
     [U("Hi"), S("Be brief."), U("Explain gravity.")], [True, False], False),
    ("assistant_last",
     [U("Hi"), A("  Hello.  ")], [True, False], False),
    ("empty_content",
     [U(""), A("   ")], [True], False),
]

LLAMA4 = [
    ("user_only",
     [U("What is the capital of France?")], [True, False], False),
    ("system_user",
     [S("You are a terse assistant."), U("Name three primes.")], [True, False], False),
    ("multi_turn",
     [S("Be kind."), U("Hi!"), A("Hello! How can I help?"), U("Tell me a joke about cats.")], [True, False], False),
    ("system_trimmed_others_not",
     [S("\n  Be kind.  \n"), U("  Hi!  "), A("\n Hello \n")], [True], False),
    ("system_empty_after_trim",
     [S(" \n "), U("Hi")], [True], False),
    ("system_not_first",
     [U("Hi"), S("  Be brief.  "), U("Explain gravity.")], [True], False),
    ("tool_result_is_json_quoted",
     [U("Weather?"), A("Checking."), T("sunny \"22C\"\n\\ok\u0001\u00e9"), A("It is sunny.")], [True], False),
    ("unicode",
     [U("Traduis « bonjour » en 日本語, s'il te plaît 🙂")], [True], False),
]


def build(env, template, table):
    cases = {}
    for name, messages, agps, with_nothink in table:
        for agp in agps:
            key = f"{name}/agp={int(agp)}"
            cases[key] = {"messages": messages, "add_generation_prompt": agp,
                          "rendered": render(env, template, messages, agp)}
            if with_nothink and agp:
                cases[key + "/enable_thinking=0"] = {
                    "messages": messages, "add_generation_prompt": agp, "enable_thinking": False,
                    "rendered": render(env, template, messages, agp, enable_thinking=False)}
    return cases


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city — «quoted», 日本.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["city"], "additionalProperties": False}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "limit": {"type": "number", "default": 2.5},
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["query"]}}}


def C(name, arguments, call_id="call_1"):
    return {"id": call_id, "name": name, "arguments": arguments}


def AC(content, calls, reasoning=None):
    m = {"role": "assistant", "content": content, "tool_calls": calls}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    return m


W_ARGS = '{"city": "Paris", "unit": "celsius"}'
S_ARGS = '{"query":"strata \\"llm\\"","tags":["a","b"],"limit":3}'

# (name, tools (None: undefined), messages, add_generation_prompt values, enable_thinking=false too,
#  tools_in_user_message (None: undefined))
QWEN3_TOOLS = [
    ("tools_system_first", [WEATHER, SEARCH], [S("Be brief."), U("Weather in Paris?")], [True, False], True, None),
    ("tools_no_system", [WEATHER], [U("Weather in Paris?")], [True], False, None),
    ("tools_empty_list", [], [S("sys"), U("Hi")], [True], False, None),
    ("tool_call_round_trip", [WEATHER],
     [S("You can call tools."), U("Weather in Paris?"), AC("", [C("get_weather", W_ARGS)]),
      T('{"temp": 22, "sky": "clear"}'), A("It is 22C and clear.")], [True, False], False, None),
    ("parallel_calls_with_content", [WEATHER, SEARCH],
     [U("Weather and news?"), AC("Let me check both.", [C("get_weather", W_ARGS), C("search", S_ARGS, "call_2")]),
      T("sunny"), T("nothing new")], [True], False, None),
    ("call_after_reasoning", [WEATHER],
     [U("Weather?"), AC("<think>\nI need the tool.\n</think>\n\n", [C("get_weather", W_ARGS)]), T("rain")],
     [True, False], False, None),
    ("call_with_reasoning_content", [WEATHER],
     [U("Weather?"), AC("\n", [C("get_weather", '{"city":"Oslo"}')], reasoning="Use the tool."), T("snow")],
     [True], False, None),
    ("calls_in_history", [SEARCH],
     [U("Find x"), AC("", [C("search", S_ARGS)]), T("found"), A("Here."), U("Thanks")], [True], False, None),
]

LLAMA31_TOOLS = [
    ("no_tools_plain", None, [U("Hi")], [True, False], False, None),
    ("no_tools_system", None, [S("  Be kind. "), U("Hi"), A(" Hello "), U("Bye")], [True], False, None),
    ("tools_in_user", [WEATHER, SEARCH], [S("Be brief."), U("  Weather in Paris? ")], [True], False, None),
    ("tools_in_system", [WEATHER], [S("Be brief."), U("Weather in Paris?")], [True], False, False),
    ("tools_empty_list", [], [U("Hi")], [True], False, None),
    ("tool_call_round_trip", [WEATHER],
     [S("sys"), U("Weather?"), AC("", [C("get_weather", W_ARGS)]), T('{"temp": 22}'), A("It is 22C.")],
     [True, False], False, None),
    ("ipython_role", [SEARCH],
     [U("Find"), AC("", [C("search", S_ARGS)]), {"role": "ipython", "content": "result \"x\""}], [True], False, None),
]

LLAMA4_TOOLS = [
    ("tools_with_system", [WEATHER, SEARCH], [S("Be brief."), U("  Weather in Paris? ")], [True], False, None),
    ("tools_without_system", [WEATHER], [U("Weather in Paris?")], [True, False], False, None),
    ("tools_in_system", [WEATHER], [S("Be brief."), U("Weather?")], [True], False, False),
    ("tool_call_round_trip", [WEATHER, SEARCH],
     [S("sys"), U("Weather and news?"),
      AC("", [C("get_weather", W_ARGS), C("search", S_ARGS, "call_2")]),
      T('{"temp": 22}'), T("no news"), A("It is 22C.")], [True, False], False, None),
    ("call_with_content", [WEATHER], [U("Weather?"), AC("Checking.", [C("get_weather", W_ARGS)])], [False], False, None),
]


def to_template_messages(messages, object_arguments):
    out = []
    for m in messages:
        m = dict(m)
        if "tool_calls" in m:
            m["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["name"],
                "arguments": json.loads(c["arguments"]) if object_arguments else c["arguments"]}}
                for c in m["tool_calls"]]
        out.append(m)
    return out


def build_tools(env, template, table, object_arguments):
    cases = {}
    for name, tools, messages, agps, with_nothink, in_user in table:
        for agp in agps:
            for nothink in ([False, True] if with_nothink and agp else [False]):
                kw = dict(messages=to_template_messages(messages, object_arguments), add_generation_prompt=agp,
                          bos_token=BOS, eos_token="")
                if tools is not None:
                    kw["tools"] = tools
                if in_user is not None:
                    kw["tools_in_user_message"] = in_user
                if nothink:
                    kw["enable_thinking"] = False
                key = f"{name}/agp={int(agp)}" + ("/enable_thinking=0" if nothink else "")
                case = {"messages": messages, "add_generation_prompt": agp,
                        "rendered": env.from_string(template).render(**kw)}
                if tools is not None:
                    case["tools"] = tools
                if in_user is not None:
                    case["tools_in_user_message"] = in_user
                if nothink:
                    case["enable_thinking"] = False
                cases[key] = case
    return cases


def main():
    env = make_env()
    with open(os.path.join(FIXTURES, "chat_templates.json"), encoding="utf-8") as f:
        shared = json.load(f)
    for family, entry in shared.items():
        for key, case in entry["cases"].items():
            got = render(env, entry["template"], case["messages"], case["add_generation_prompt"],
                         case.get("enable_thinking"))
            if got != case["rendered"]:
                sys.exit(f"environment check failed: {family} {key} renders differently")
    with open(os.path.join(FIXTURES, "llama4_template.jinja"), encoding="utf-8") as f:
        llama4_template = f.read()

    out = {
        "qwen3": {"template": shared["qwen3"]["template"], "cases": build(env, shared["qwen3"]["template"], QWEN3)},
        "llama3": {"template": shared["llama3"]["template"], "cases": build(env, shared["llama3"]["template"], LLAMA3)},
        "llama4": {"template": llama4_template, "cases": build(env, llama4_template, LLAMA4)},
    }
    path = os.path.join(FIXTURES, "chat_extra.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n = sum(len(v["cases"]) for v in out.values())
    print(f"wrote {path}: {n} cases")

    with open(os.path.join(ROOT, "apps", "mkmodel", "chat_templates.cpp"), encoding="utf-8") as f:
        m = re.search(r'llama31_chat_template\(\) noexcept \{\s*static constexpr std::string_view t = R"tmpl\((.*?)\)tmpl";',
                      f.read(), re.S)
    llama31_template = m.group(1)
    tools_out = {
        "qwen3": {"template": shared["qwen3"]["template"],
                  "cases": build_tools(env, shared["qwen3"]["template"], QWEN3_TOOLS, object_arguments=False)},
        "llama31": {"template": llama31_template,
                    "cases": build_tools(env, llama31_template, LLAMA31_TOOLS, object_arguments=True)},
        "llama4": {"template": llama4_template,
                   "cases": build_tools(env, llama4_template, LLAMA4_TOOLS, object_arguments=True)},
    }
    path = os.path.join(FIXTURES, "chat_tools.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tools_out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n = sum(len(v["cases"]) for v in tools_out.values())
    print(f"wrote {path}: {n} cases")


if __name__ == "__main__":
    main()
