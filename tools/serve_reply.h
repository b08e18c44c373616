// serve_reply.h — how `kvrun serve`'s handlers answer: a JSON body, an OpenAI-style error object,
// and the wrapper that turns a handler's exceptions into those (serve.cpp, serve_extras.cpp).
#pragma once

#include <httplib.h>

#include <exception>
#include <string>

#include "serve_api.h"

namespace kvrun::tools {

/// A 200 (or the status already set) with `j` as application/json.
inline void send_json(httplib::Response& res, const json& j) {
  res.set_content(to_wire(j), "application/json");
}

/// The error's status and its {"error": {...}} object.
inline void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(to_wire(error_json(e.status, e.what(), e.type, e.param)), "application/json");
}

/// The error's status and ollama's error object {"error": "message"} (ollama's docs/api.md).
inline void send_ollama_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(to_wire(json{{"error", e.what()}}), "application/json");
}

/// Wraps a handler: ApiError → its status and error object (ollama's form when `ollama`);
/// anything else → 500.
template <class F>
httplib::Server::Handler guarded(F f, bool ollama = false) {
  return [f, ollama](const httplib::Request& req, httplib::Response& res) {
    auto fail = [&](const ApiError& e) { ollama ? send_ollama_error(res, e) : send_error(res, e); };
    try {
      f(req, res);
    } catch (const ApiError& e) {
      fail(e);
    } catch (const std::exception& e) {
      fail(ApiError(500, std::string("internal error: ") + e.what(), "", "server_error"));
    }
  };
}

}  // namespace kvrun::tools
