// mlops ui: the one place HTML is made from text (issue 41, finding 3).
//
// `html` is a tagged template: every `${value}` is escaped unless it is itself a
// fragment made by `html` (or a list of them), so text from the server -- a model name,
// a Prometheus error, a PR body -- can only ever become text. `render(el, fragment)`
// is the only assignment of markup into the page, and it takes nothing but a fragment:
// a plain string is a TypeError. The server's Content-Security-Policy adds
// `require-trusted-types-for 'script'` with this file's policy as the only one
// allowed, so in a browser that enforces Trusted Types (Chromium) any other
// `innerHTML = string` anywhere in the page throws instead of parsing markup.
//
// Rules the templates keep (tests/ui/test_ui_escaping.py checks them in every file):
// attribute values are quoted (`data-x="${v}"`, never `data-x=${v}`), no inline event
// handlers (`onclick=`) or `style=` attributes, no `<script>`; links from text go
// through `safeUrl`.
"use strict";

const Html = (() => {
  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
    "`": "&#96;" };
  const escape = (v) => String(v ?? "").replace(/[&<>"'`]/g, (c) => ESCAPES[c]);

  // A fragment: markup whose every piece of text was escaped on the way in. The class is
  // not exported; a fragment is only ever made by `html` below.
  class Fragment {
    constructor(text) {
      this.text = text;
      Object.freeze(this);
    }
    // `a + b` of two fragments would make a string, and a string is escaped again:
    // join fragments inside a template instead (html`${a}${b}`).
    toString() { throw new TypeError("join fragments with html`${a}${b}`, not +"); }
  }

  const piece = (v) => {
    if (v instanceof Fragment) return v.text;
    if (Array.isArray(v)) return v.map(piece).join("");
    return escape(v);
  };

  function html(strings, ...values) {
    let out = strings[0];
    values.forEach((v, i) => { out += piece(v) + strings[i + 1]; });
    return new Fragment(out);
  }

  // Trusted Types (CSP `trusted-types mlops-html`): the one policy, used only by render.
  const policy = window.trustedTypes
    ? window.trustedTypes.createPolicy("mlops-html", { createHTML: (s) => s })
    : null;

  function render(el, fragment) {
    if (!(fragment instanceof Fragment)) {
      throw new TypeError("Html.render takes a fragment made by html`...`, not a string");
    }
    el.innerHTML = policy ? policy.createHTML(fragment.text) : fragment.text;
  }

  // A link target from text: http(s), a path on this origin, or nothing.
  const safeUrl = (u) => (/^(https?:\/\/|\/(?!\/)|[a-z0-9._-]+\/)/i.test(String(u))
    ? String(u) : "#");

  return { html, render, safeUrl };
})();
