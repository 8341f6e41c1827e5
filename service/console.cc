#include "service/console.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <memory>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "service/console_sessions.h"
#include "service/json_api.h"
#include "service/routes.h"

namespace sluiced {

// service/console/*, compiled in (cmake/console_assets.cmake).
extern const std::string_view kConsole_index_html;
extern const std::string_view kConsole_console_js;
extern const std::string_view kConsole_console_css;

namespace {

using nlohmann::json;

constexpr std::string_view kCookie = "sluice_console";
// The audit log's tail read per search, and the records one search returns at most.
constexpr std::size_t kAuditTailBytes = 4 << 20;
constexpr std::size_t kMaxAuditRecords = 200;
constexpr std::size_t kDefaultAuditRecords = 50;
// Rows of each "most ... now" list.
constexpr std::size_t kTopRows = 20;
// The admin API's calls the console makes (method, path under /admin), and which of them
// are audited actions (the session's actor goes into their body).
struct ProxiedCall {
  http::verb method;
  std::string_view path;
  bool audited;
};
constexpr ProxiedCall kProxied[] = {
    {http::verb::get, "/admin/config", false},
    {http::verb::post, "/admin/inspect", false},
    {http::verb::post, "/admin/leases/list", false},
    {http::verb::post, "/admin/leases/release", true},
    {http::verb::post, "/admin/reset", true},
    {http::verb::get, "/admin/overrides", false},
    {http::verb::post, "/admin/overrides", true},
    {http::verb::post, "/admin/overrides/clear", true},
};

// The console's own calls (the proxied ones are in kProxied).
struct ConsoleCall {
  http::verb method;
  std::string_view path;
};
constexpr ConsoleCall kOwnCalls[] = {
    {http::verb::post, "/console/api/signin"},  {http::verb::get, "/console/api/session"},
    {http::verb::post, "/console/api/signout"}, {http::verb::get, "/console/api/top"},
    {http::verb::post, "/console/api/peek"},    {http::verb::get, "/console/api/audit"},
};
constexpr std::string_view kApi = "/console/api";

// Whether (method, path) is a call of the console's: its own or a proxied admin call.
bool KnownCall(http::verb method, std::string_view path) {
  for (const ConsoleCall& c : kOwnCalls)
    if (c.method == method && c.path == path) return true;
  if (!path.starts_with(kApi)) return false;
  for (const ProxiedCall& c : kProxied)
    if (c.method == method && path.substr(kApi.size()) == c.path) return true;
  return false;
}

struct Console {
  Console(Engine& e, std::string t)
      : engine(e), token(std::move(t)), admin(AdminRoutes(e, token)) {}
  Engine& engine;
  std::string token;
  HttpHandler admin;
  ConsoleSessions sessions;
};

std::string_view View(boost::beast::string_view s) {
  return {s.data(), s.size()};
}

// Headers every console answer carries: the page may load only its own script and style
// sheet and call only this origin; it may not be framed, sniffed or leak its address.
void Harden(HttpResponse& r, std::string_view cache = "no-store") {
  r.set("Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'");
  r.set("X-Content-Type-Options", "nosniff");
  r.set("Referrer-Policy", "no-referrer");
  r.set(http::field::x_frame_options, "DENY");
  r.set(http::field::cache_control, std::string(cache));
}

HttpResponse Answer(http::status status, std::string body,
                    std::string_view type = "application/json") {
  HttpResponse r = MakeResponse(status, std::move(body), type);
  Harden(r);
  return r;
}

HttpResponse Refuse(http::status status, std::string_view message) {
  return Answer(status, ErrorJson(message));
}

std::string_view PathOf(const HttpRequest& r) {
  const std::string_view target = View(r.target());
  return target.substr(0, target.find('?'));
}

bool IsHex(char c) {
  return std::isxdigit(static_cast<unsigned char>(c)) != 0;
}

// The value of `name` in the query string, %XX and '+' decoded; empty when absent.
std::string QueryParam(const HttpRequest& r, std::string_view name) {
  const std::string_view target = View(r.target());
  const auto q = target.find('?');
  std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view param = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto eq = param.find('=');
    if (param.substr(0, eq) != name || eq == std::string_view::npos) continue;
    std::string out;
    const std::string_view v = param.substr(eq + 1);
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v[i] == '+') {
        out.push_back(' ');
      } else if (v[i] == '%' && i + 2 < v.size() && IsHex(v[i + 1]) && IsHex(v[i + 2])) {
        out.push_back(static_cast<char>(std::stoi(std::string(v.substr(i + 1, 2)), nullptr, 16)));
        i += 2;
      } else {
        out.push_back(v[i]);
      }
    }
    return out;
  }
  return "";
}

// The session cookie's value, empty when the request has none.
std::string CookieOf(const HttpRequest& r) {
  std::string_view cookies = View(r[http::field::cookie]);
  while (!cookies.empty()) {
    const auto semi = cookies.find(';');
    std::string_view c = cookies.substr(0, semi);
    cookies = semi == std::string_view::npos ? std::string_view() : cookies.substr(semi + 1);
    while (!c.empty() && c.front() == ' ') c.remove_prefix(1);
    if (c.size() > kCookie.size() && c.starts_with(kCookie) && c[kCookie.size()] == '=')
      return std::string(c.substr(kCookie.size() + 1));
  }
  return "";
}

// Set-Cookie for `value`; an empty value ends the cookie.
std::string SessionCookie(const HttpRequest& r, const std::string& value) {
  std::string c =
      std::string(kCookie) + "=" + value + "; Path=/console/; HttpOnly; SameSite=Strict";
  if (value.empty()) c += "; Max-Age=0";
  if (View(r["X-Forwarded-Proto"]) == "https") c += "; Secure";
  return c;
}

// A POST from a browser names its origin: it must be this listener's (Host), over either
// scheme (a TLS-terminating proxy may sit in front). A request with no Origin is not a
// browser's cross-site form: the cookie's SameSite=Strict and the CSRF token still hold.
bool SameOrigin(const HttpRequest& r) {
  const std::string_view origin = View(r[http::field::origin]);
  if (origin.empty()) return true;
  const std::string host(View(r[http::field::host]));
  return origin == "http://" + host || origin == "https://" + host;
}

bool HasControl(const std::string& v) {
  return std::any_of(v.begin(), v.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

HttpResponse Asset(std::string_view path) {
  std::string_view body, type;
  if (path == "/console/") {
    body = kConsole_index_html;
    type = "text/html; charset=utf-8";
  } else if (path == "/console/console.js") {
    body = kConsole_console_js;
    type = "text/javascript; charset=utf-8";
  } else if (path == "/console/console.css") {
    body = kConsole_console_css;
    type = "text/css; charset=utf-8";
  } else {
    return Refuse(http::status::not_found, "no such console page");
  }
  HttpResponse r = MakeResponse(http::status::ok, std::string(body), type);
  // The files change only with sluiced: revalidated on each load, never stored by a proxy.
  Harden(r, "no-cache, private");
  return r;
}

void SignIn(Console& c, const HttpRequest& request, const Respond& respond) {
  if (const auto wait = c.sessions.SignInClosedFor(); wait.count() > 0) {
    HttpResponse r = Refuse(http::status::too_many_requests,
                            "sign-in is closed for a while after a wrong token");
    r.set(http::field::retry_after, std::to_string((wait.count() + 999) / 1000));
    return respond(std::move(r));
  }
  const json body = json::parse(request.body(), nullptr, false);
  std::string token, actor;
  if (body.is_object() && body.contains("token") && body["token"].is_string())
    token = body["token"];
  if (body.is_object() && body.contains("actor") && body["actor"].is_string())
    actor = body["actor"];
  if (actor.empty() || actor.size() > 100 || HasControl(actor))
    return respond(Refuse(http::status::bad_request,
                          "sign in with your name (1-100 characters, no control characters): "
                          "it is the actor of every action you take"));
  if (c.token.empty() || !ConstantTimeEquals(token, c.token)) {
    c.sessions.SignInFailed();
    spdlog::warn("console sign-in refused (wrong token) actor={}", actor);
    return respond(Refuse(http::status::unauthorized,
                          c.token.empty() ? "this server has no admin token configured"
                                          : "the admin token is wrong"));
  }
  c.sessions.SignInSucceeded();
  const ConsoleSession s = c.sessions.Create(actor);
  spdlog::info("console sign-in actor={}", actor);
  HttpResponse r = Answer(http::status::ok, json{{"actor", s.actor}, {"csrf", s.csrf}}.dump());
  r.set(http::field::set_cookie, SessionCookie(request, s.id));
  respond(std::move(r));
}

// The request the admin API would get for `call`, with the admin token and, for an audited
// action, the session's actor in the body (whatever the page sent as actor is replaced).
HttpRequest AdminRequest(const Console& c, const ConsoleSession& s, const HttpRequest& request,
                         const ProxiedCall& call) {
  HttpRequest out{call.method, std::string(call.path), 11};
  out.set(http::field::authorization, "Bearer " + c.token);
  if (call.method == http::verb::post) {
    json body = json::parse(request.body(), nullptr, false);
    if (body.is_object() && call.audited) body["actor"] = s.actor;
    out.body() = body.dump(-1, ' ', false, json::error_handler_t::replace);
    out.set(http::field::content_type, "application/json");
  }
  out.prepare_payload();
  return out;
}

// The ids with the most live leases now: the candidates are the ids of the library's
// per-id gauges (those this instance acquired leases for, with the fleet-wide count its
// latest acquire saw), the kTopRows highest of them counted again in the store (a release
// or an expiry since then shows), those with none left dropped.
json MostLiveLeases(Engine& engine) {
  std::vector<std::tuple<int64_t, std::string, std::string>> live;
  for (const sluice::MetricSample& m : engine.client().Metrics()) {
    if (m.name != "sluice_leases_live" || m.value <= 0) continue;
    std::string limiter, id;
    for (const auto& [k, v] : m.labels) {
      if (k == "limiter") limiter = v;
      if (k == "id") id = v;
    }
    live.emplace_back(static_cast<int64_t>(m.value), limiter, id);
  }
  std::sort(live.begin(), live.end(), [](auto& a, auto& b) { return a > b; });
  if (live.size() > kTopRows) live.resize(kTopRows);
  const auto config = engine.config();
  for (auto& [n, limiter, id] : live) {
    for (const auto& rule : config->rules) {
      if (rule->limiter_name != limiter) continue;
      auto now = engine.ListLeases(Match{.rule = rule, .id = id});
      if (now.ok()) n = static_cast<int64_t>(now->size());
      break;
    }
  }
  std::erase_if(live, [](const auto& row) { return std::get<0>(row) <= 0; });
  std::stable_sort(live.begin(), live.end(),
                   [](auto& a, auto& b) { return std::get<0>(a) > std::get<0>(b); });
  json leases = json::array();
  for (auto& [n, limiter, id] : live)
    leases.push_back({{"limiter", limiter}, {"id", id}, {"live", n}});
  return leases;
}

// GET /console/api/top (blocking: run on the engine's pool): MostLiveLeases, and the ids
// this instance refused most in the last minute or two.
HttpResponse Top(Engine& engine) {
  const json leases = MostLiveLeases(engine);
  json refused = json::array();
  for (const auto& row : engine.refused_ids().Top(kTopRows, RefusedIds::MinuteNow()))
    refused.push_back({{"domain", row.domain},
                       {"limiter", row.limiter},
                       {"id", row.id},
                       {"refused", row.refused}});
  return Answer(http::status::ok, json{{"leases", leases}, {"refused", refused}}.dump(
                                      -1, ' ', false, json::error_handler_t::replace));
}

// GET /console/api/audit?id=&actor=&limit=: the newest records of the audit log whose id
// and actor contain the ones given, from the log's last kAuditTailBytes (blocking: run on
// the engine's pool).
HttpResponse AuditSearch(const std::string& path, const std::string& id, const std::string& actor,
                         std::size_t limit) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    return Answer(http::status::ok, json{{"records", json::array()}, {"searched_bytes", 0}}.dump());
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - std::streamoff(kAuditTailBytes));
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  in.seekg(from);
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  std::vector<json> found;
  std::size_t end = tail.size();
  // Newest first: lines from the end; the first line of a cut tail is partial and skipped.
  while (end > 0 && found.size() < limit) {
    const std::size_t start = tail.rfind('\n', end - 1);
    const std::size_t begin = start == std::string::npos ? 0 : start + 1;
    if (begin == 0 && from > 0) break;
    json record = json::parse(std::string_view(tail).substr(begin, end - begin), nullptr, false);
    end = begin == 0 ? 0 : begin - 1;
    if (!record.is_object()) continue;
    auto contains = [&](const char* field, const std::string& want) {
      return want.empty() || (record.contains(field) && record[field].is_string() &&
                              record[field].get<std::string>().find(want) != std::string::npos);
    };
    if (contains("id", id) && contains("actor", actor)) found.push_back(std::move(record));
  }
  return Answer(http::status::ok,
                json{{"records", found}, {"searched_bytes", tail.size()}, {"log", path}}.dump(
                    -1, ' ', false, json::error_handler_t::replace));
}

// POST /console/api/peek: /v1/check's body, every descriptor asked with hits 0 (the id's
// state read, nothing spent).
void Peek(Engine& engine, const HttpRequest& request, const Respond& respond) {
  auto parsed = ParseCheckRequest(request.body());
  if (!parsed.ok()) return respond(Refuse(http::status::bad_request, parsed.status().message()));
  for (RequestDescriptor& d : parsed->descriptors) d.hits = 0;
  engine.Check(std::move(*parsed), [respond](CheckResult result) {
    if (result.unknown_domain) return respond(Refuse(http::status::bad_request, "unknown domain"));
    respond(Answer(http::status::ok, FormatCheckResponse(result)));
  });
}

// The calls of a signed-in page.
void Api(Console& c, const ConsoleSession& s, HttpRequest&& request, const Respond& respond) {
  const std::string path(PathOf(request));
  const http::verb method = request.method();
  if (path == "/console/api/session" && method == http::verb::get)
    return respond(Answer(http::status::ok, json{{"actor", s.actor}, {"csrf", s.csrf}}.dump()));
  if (path == "/console/api/signout" && method == http::verb::post) {
    c.sessions.Remove(s.id);
    HttpResponse r = Answer(http::status::ok, R"({"signed_out":true})");
    r.set(http::field::set_cookie, SessionCookie(request, ""));
    return respond(std::move(r));
  }
  if (path == "/console/api/top" && method == http::verb::get)
    return boost::asio::post(c.engine.blocking_pool(), [&c, respond] { respond(Top(c.engine)); });
  if (path == "/console/api/peek" && method == http::verb::post)
    return Peek(c.engine, request, respond);
  if (path == "/console/api/audit" && method == http::verb::get) {
    const std::string asked = QueryParam(request, "limit");
    const std::size_t limit =
        asked.empty() ? kDefaultAuditRecords
                      : std::clamp<std::size_t>(
                            static_cast<std::size_t>(std::max(1, std::atoi(asked.c_str()))), 1,
                            kMaxAuditRecords);
    return boost::asio::post(
        c.engine.blocking_pool(),
        [&c, id = QueryParam(request, "id"), actor = QueryParam(request, "actor"), limit, respond] {
          respond(AuditSearch(c.engine.audit_log(), id, actor, limit));
        });
  }
  for (const ProxiedCall& call : kProxied) {
    if (method != call.method || path.substr(kApi.size()) != call.path) continue;
    return c.admin(AdminRequest(c, s, request, call), [respond](HttpResponse r) {
      Harden(r);
      respond(std::move(r));
    });
  }
  respond(Refuse(http::status::not_found,
                 "no such console call: " + std::string(request.method_string()) + " " + path));
}

void HandleConsole(Console& c, HttpRequest&& request, const Respond& respond) {
  const std::string_view path = PathOf(request);
  const http::verb method = request.method();
  if (path == "/console") {
    HttpResponse r = Answer(http::status::permanent_redirect, "", "text/plain");
    r.set(http::field::location, "/console/");
    return respond(std::move(r));
  }
  if (!path.starts_with("/console/api/")) {
    if (method != http::verb::get && method != http::verb::head)
      return respond(Refuse(http::status::method_not_allowed, "use GET"));
    return respond(Asset(path));
  }
  // An unknown call is 404 whoever asks (signed in or not), as on the admin API.
  if (!KnownCall(method, path))
    return respond(Refuse(
        http::status::not_found,
        "no such console call: " + std::string(request.method_string()) + " " + std::string(path)));
  if (method == http::verb::post && !SameOrigin(request))
    return respond(Refuse(http::status::forbidden, "a console call from another origin"));
  if (path == "/console/api/signin" && method == http::verb::post)
    return SignIn(c, request, respond);
  const std::optional<ConsoleSession> session = c.sessions.Find(CookieOf(request));
  if (!session)
    return respond(Refuse(http::status::unauthorized, "sign in first (or again: sessions end)"));
  // Every POST changes something or could: each carries the session's CSRF token.
  if (method == http::verb::post &&
      !ConstantTimeEquals(View(request["X-CSRF-Token"]), session->csrf))
    return respond(Refuse(http::status::forbidden, "this call needs the session's X-CSRF-Token"));
  Api(c, *session, std::move(request), respond);
}

}  // namespace

HttpHandler AdminListenerRoutes(Engine& engine, std::string token) {
  auto console = std::make_shared<Console>(engine, std::move(token));
  return [console](HttpRequest&& request, Respond respond) {
    const std::string_view path = PathOf(request);
    if (path == "/console" || path.starts_with("/console/"))
      return HandleConsole(*console, std::move(request), respond);
    console->admin(std::move(request), std::move(respond));
  };
}

}  // namespace sluiced
