// test_serve_web.cpp — the chat page `kvrun serve` answers at /: served (also with --api-key,
// absent with --no-webui), and driven in headless Chromium through puppeteer-core
// (tests/serve/chat_page.cjs: streaming, Stop, Regenerate, storage, /props stats, escaping). The
// browser test skips with a message when node, Debian's chromium or the npm package is missing.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <string>

#include "serve_process.h"
#include "test_util.h"

namespace kvrun {
namespace {

using namespace serve_test;

TEST(ServeWeb, PageIsServedAndPublicAndCanBeTurnedOff) {
  {
    START_SERVER(s, "--api-key", "k");
    auto r = s.client()->Get("/");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_NE(r->get_header_value("Content-Type").find("text/html"), std::string::npos);
    EXPECT_NE(r->body.find("<title>kvrun</title>"), std::string::npos);
    EXPECT_NE(r->body.find("/v1/chat/completions"), std::string::npos);
    EXPECT_EQ(s.client()->Get("/props")->status, 401);  // the API stays behind the key
  }
  START_SERVER(s, "--no-webui");
  auto r = s.client()->Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

TEST(ServeWeb, ChatPageInHeadlessChromium) {
  const std::string node_modules = KVRUN_WEB_NODE_MODULES;
  const std::string chromium = "/usr/bin/chromium";
  if (test::run_command("command -v node").exit_code != 0) GTEST_SKIP() << "node is not installed";
  if (!std::filesystem::exists(chromium))
    GTEST_SKIP() << chromium << " is missing (Debian package chromium, scripts/setup.sh)";
  if (!std::filesystem::exists(std::filesystem::path(node_modules) / "puppeteer-core"))
    GTEST_SKIP() << "the puppeteer-core npm package is not installed in " << node_modules
                 << " (ctest's web_npm_install_puppeteer installs it)";
  START_SERVER(s);
  std::filesystem::create_directories(KVRUN_TEST_ARTIFACTS);
  const std::string shot = std::string(KVRUN_TEST_ARTIFACTS) + "/chat_page.png";
  std::filesystem::remove(shot);
  const auto r = test::run_command("NODE_PATH='" + node_modules + "' timeout 180 node '" +
                                   std::string(KVRUN_SERVE_SCRIPTS) + "/chat_page.cjs' '" +
                                   s.url() + "/' '" + shot + "' " + chromium);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << s.log();
  EXPECT_TRUE(std::filesystem::exists(shot));
  std::printf("%s(screenshot: %s)\n", r.out.c_str(), shot.c_str());
}

}  // namespace
}  // namespace kvrun
