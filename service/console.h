// service/console.h — the support console (docs/operating.md, The support console): a page,
// one script and one style sheet compiled into sluiced, served on the admin listener under
// /console/, and the calls its script makes under /console/api/.
//
// Security model: sign-in posts the admin token and the signer's name (the audit log's
// actor) in a JSON body, never in a URL; a right token opens a session (ConsoleSessions)
// named by an HttpOnly, SameSite=Strict cookie on Path=/console/ (Secure when the request
// came through TLS, X-Forwarded-Proto: https); every POST needs the session's CSRF token
// in X-CSRF-Token (403 without it) and, when the browser sends Origin, this listener's own
// origin. A wrong token is answered 401, like the admin API's, and closes sign-in for a
// doubling time (429 with Retry-After meanwhile). Every answer carries a strict
// Content-Security-Policy (self only, no inline script or style, no framing).
//
// The console's actions go through the admin API's own handlers (AdminRoutes), the session's
// actor put in the body: they are audited as the admin API's calls are.
//
// Thread-safety: the handler may be called from any thread.
#pragma once

#include <string>

#include "service/engine.h"
#include "service/http_server.h"

namespace sluiced {

// The admin listener's routes: /console and /console/... as above, everything else the
// admin API (AdminRoutes with `token`). An empty token refuses every sign-in, as it
// refuses every admin call.
HttpHandler AdminListenerRoutes(Engine& engine, std::string token);

}  // namespace sluiced
