# Web UI: the static page under web/ plus the two libraries it renders with
# (marked, DOMPurify), fetched from the npm registry by `npm ci` and never
# committed. build/web/ is what the server serves by default.
#
#   make web-assets    build/web = web/ + vendor/{marked,purify}.min.js
#   make browser-test  the UI in headless Debian Chromium against the real server

WEB_SRC := $(shell find web -type f 2>/dev/null)

.PHONY: web-assets browser-test

node_modules/.package-lock.json: package.json package-lock.json
	@scripts/deps.sh nodejs npm
	npm ci --no-audit --no-fund
	@touch $@

build/web.stamp: node_modules/.package-lock.json $(WEB_SRC) mk/web.mk
	@rm -rf build/web
	@mkdir -p build/web/vendor
	cp -R web/. build/web/
	cp node_modules/marked/lib/marked.umd.js build/web/vendor/marked.min.js
	cp node_modules/dompurify/dist/purify.min.js build/web/vendor/purify.min.js
	@touch $@

web-assets: build/web.stamp

browser-test: web-assets $(BUILD)/reflexor
	@scripts/deps.sh chromium
	node --test tests/browser/

TEST_EXTRA += browser-test
