// Package e2e drives the web dashboard in a real headless browser
// (Debian's chromium, through chromedp): a module of its own, so that the
// browser driver stays out of Hopper's dependencies. `make test` runs it;
// .ci/debian-package.sh installs the browser.
package e2e
