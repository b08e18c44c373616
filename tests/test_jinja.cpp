// test_jinja.cpp — kvrun's Jinja engine (src/text/jinja*.cpp) against Python's jinja2 as the
// oracle (tests/data/render_jinja.py run by /usr/bin/python3 with Debian's python3-jinja2):
// every chat template in ../shared/fixtures/templates/ rendered for a set of conversations,
// small feature templates, and the engine's errors (with template lines) on malformed input.
#include <nlohmann/json.hpp>

#include <map>
#include <set>

#include "test_util.h"
#include "text/jinja.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using kvrun::jinja::Dict;
using kvrun::jinja::JinjaError;
using kvrun::jinja::Template;
using kvrun::jinja::Value;
namespace test = kvrun::test;

namespace {

constexpr const char* kToday = "2025-03-07";

/// A JSON value as an engine Value (key order kept).
Value to_value(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return Value::none();
    case json::value_t::boolean: return Value(j.get<bool>());
    case json::value_t::number_integer: return Value(j.get<int64_t>());
    case json::value_t::number_unsigned: return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case json::value_t::number_float: return Value(j.get<double>());
    case json::value_t::string: return Value(j.get<std::string>());
    case json::value_t::array: {
      std::vector<Value> items;
      for (const json& x : j) items.push_back(to_value(x));
      return Value::list(std::move(items));
    }
    case json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), to_value(it.value()));
      return Value::dict(std::move(d));
    }
    default: return Value();
  }
}

/// The engine's context for one oracle context: its variables plus a strftime_now fixed to
/// kToday (as the oracle's).
Dict to_context(const json& ctx) {
  Dict d = to_value(ctx).as_dict();
  d.erase("__now__");
  d.set("strftime_now", Value::function(
                            [](kvrun::jinja::CallArgs& a) {
                              std::tm tm{};
                              tm.tm_year = 2025 - 1900;
                              tm.tm_mon = 2;
                              tm.tm_mday = 7;
                              tm.tm_wday = 5;
                              tm.tm_yday = 65;
                              char buf[256];
                              const std::string fmt = a.get(0, "format").str();
                              const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
                              return Value(std::string(buf, n));
                            },
                            "strftime_now"));
  return d;
}

json tools_json() {
  return json::parse(R"([
    {"type": "function", "function": {"name": "get_weather",
      "description": "Get the current weather in a city",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "search",
      "description": "Search the web",
      "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "max_results": {"type": "integer"}},
        "required": ["query"]}}}
  ])");
}

json msg(const char* role, const std::string& content) { return {{"role", role}, {"content", content}}; }

json tool_call_turn() {
  return json::parse(R"({"role": "assistant", "content": "", "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]})");
}

json tool_result(const char* id, const char* name, const char* content) {
  return {{"role", "tool"}, {"tool_call_id", id}, {"name", name}, {"content", content}};
}

/// The conversations every fixture template is rendered with: name → context.
std::vector<std::pair<std::string, json>> conversations() {
  const json base = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"tools", nullptr},
                     {"__now__", kToday}};
  auto ctx = [&](json messages, bool gen) {
    json c = base;
    c["messages"] = std::move(messages);
    c["add_generation_prompt"] = gen;
    return c;
  };
  std::vector<std::pair<std::string, json>> out;
  out.emplace_back("user_only", ctx(json::array({msg("user", "Hello!")}), true));
  out.emplace_back("user_only_no_gen", ctx(json::array({msg("user", "Hello!")}), false));
  out.emplace_back("system_user",
                   ctx(json::array({msg("system", "You are a helpful assistant."),
                                    msg("user", "What is 2+2?")}),
                       true));
  const json multi = json::array({msg("system", "Be brief."), msg("user", "Hi"),
                                  msg("assistant", "Hello! How can I help?"),
                                  msg("user", "Tell me a \"joke\" about caf\u00e9s\n please.")});
  out.emplace_back("multi_turn", ctx(multi, true));
  json multi_done = multi;
  multi_done.push_back(msg("assistant", "  Why did the caf\u00e9 close? It ran out of beans.  "));
  out.emplace_back("multi_turn_ends_assistant", ctx(multi_done, false));
  out.emplace_back("no_system_multi",
                   ctx(json::array({msg("user", "A"), msg("assistant", "B"), msg("user", "C")}),
                       true));
  json with_tools = ctx(json::array({msg("user", "What's the weather in Paris?")}), true);
  with_tools["tools"] = tools_json();
  out.emplace_back("tools", with_tools);
  json calls = with_tools;
  calls["messages"].push_back(tool_call_turn());
  calls["messages"].push_back(tool_result("call_1", "get_weather", "{\"temperature\": 18.5}"));
  out.emplace_back("tool_call_and_result", calls);
  json calls_sys = calls;
  calls_sys["messages"].insert(calls_sys["messages"].begin(), msg("system", "Use tools."));
  calls_sys["messages"].push_back(msg("assistant", "It is 18.5 degrees in Paris."));
  calls_sys["add_generation_prompt"] = false;
  out.emplace_back("tool_round_trip_system", calls_sys);
  json think_off = ctx(json::array({msg("user", "Quick: capital of France?")}), true);
  think_off["enable_thinking"] = false;
  out.emplace_back("thinking_off", think_off);
  json think_on = ctx(json::array({msg("user", "Q1"),
                                   {{"role", "assistant"},
                                    {"content", "A1"},
                                    {"reasoning_content", "Let me think."}},
                                   msg("user", "Q2")}),
                      true);
  think_on["enable_thinking"] = true;
  out.emplace_back("thinking_on", think_on);
  return out;
}

/// Why the oracle cannot run here, or "" when /usr/bin/python3 with jinja2 is available.
std::string oracle_unavailable() {
  if (!fs::exists("/usr/bin/python3")) return "/usr/bin/python3 not found";
  const auto r = test::run_command("/usr/bin/python3 -c 'import jinja2'");
  if (r.exit_code != 0) return "python3-jinja2 is not installed for /usr/bin/python3";
  return "";
}

/// One render's outcome.
struct Outcome {
  bool ok = false;
  std::string text;  ///< the rendering, or the error message
};

/// Renders `source` with jinja2 for every context.
std::vector<Outcome> oracle(const std::string& source, const std::vector<json>& contexts) {
  test::TempDir dir;
  std::ofstream(dir / "t.jinja", std::ios::binary) << source;
  std::ofstream(dir / "c.json", std::ios::binary) << json(contexts).dump();
  const std::string cmd = "/usr/bin/python3 '" + test::test_data("render_jinja.py").string() +
                          "' '" + (dir / "t.jinja").string() + "' '" +
                          (dir / "c.json").string() + "'";
  const auto r = test::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<Outcome> out;
  if (r.exit_code != 0) return out;
  for (const json& x : json::parse(r.out))
    out.push_back({x["ok"].get<bool>(), x[x["ok"].get<bool>() ? "text" : "error"]});
  return out;
}

/// Renders `source` with kvrun for every context (parse errors count for every context).
std::vector<Outcome> kvrun_render(const std::string& source, const std::vector<json>& contexts) {
  std::vector<Outcome> out;
  std::optional<Template> t;
  std::string parse_error;
  try {
    t = Template::parse(source);
  } catch (const JinjaError& e) {
    parse_error = e.what();
  }
  for (const json& c : contexts) {
    if (!t) {
      out.push_back({false, parse_error});
      continue;
    }
    try {
      out.push_back({true, t->render(to_context(c))});
    } catch (const JinjaError& e) {
      out.push_back({false, e.what()});
    }
  }
  return out;
}

/// Fixture templates whose renderings differ from jinja2 for some conversation, and why.
const std::map<std::string, std::string> kKnownDifferences = {};

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST(Jinja, FixtureTemplatesMatchJinja2) {
  KVRUN_REQUIRE_FIXTURE("templates");
  if (const std::string why = oracle_unavailable(); !why.empty()) GTEST_SKIP() << why;
  std::vector<std::string> names;
  std::vector<json> contexts;
  for (const auto& [name, c] : conversations()) {
    names.push_back(name);
    contexts.push_back(c);
  }
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(test::fixture("templates")))
    if (e.path().extension() == ".jinja") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_FALSE(files.empty());
  int equal_renders = 0;
  int both_raise = 0;
  for (const fs::path& file : files) {
    const std::string stem = file.stem().string();
    const std::string source = read_file(file);
    const std::vector<Outcome> want = oracle(source, contexts);
    const std::vector<Outcome> got = kvrun_render(source, contexts);
    ASSERT_EQ(want.size(), contexts.size()) << stem;
    const bool known = kKnownDifferences.count(stem) > 0;
    int mismatches = 0;
    std::string first_mismatch;
    for (size_t i = 0; i < contexts.size(); ++i) {
      const bool same = want[i].ok == got[i].ok && (!want[i].ok || want[i].text == got[i].text);
      if (same) {
        (want[i].ok ? equal_renders : both_raise)++;
        continue;
      }
      ++mismatches;
      if (first_mismatch.empty())
        first_mismatch = names[i] + ":\n--- jinja2 (" + (want[i].ok ? "ok" : "raised") + ")\n" +
                         want[i].text + "\n--- kvrun (" + (got[i].ok ? "ok" : "raised") + ")\n" +
                         got[i].text;
    }
    std::printf("[template] %-52s %s\n", stem.c_str(),
                mismatches == 0 ? "equal to jinja2"
                : known         ? ("known difference: " + kKnownDifferences.at(stem)).c_str()
                                : "DIFFERS");
    if (known) {
      EXPECT_GT(mismatches, 0) << stem << " now matches jinja2: remove it from kKnownDifferences";
    } else {
      EXPECT_EQ(mismatches, 0) << stem << " differs from jinja2 in " << mismatches << " of "
                               << contexts.size() << " renders; first: " << first_mismatch;
    }
  }
  std::printf("%d renders equal to jinja2, %d raised in both\n", equal_renders, both_raise);
  EXPECT_GT(equal_renders, 0);
}
