// MathJax 2.7's configuration, read when MathJax.js loads (the next script of every page).
// Only what pymdownx.arithmatex marked is typeset (its spans and divs hold \( \) and \[ \]).
// jupyter-server-mathjax ships the STIX-Web fonts only, so MathJax is told so; its font test
// font "MathJax_Blank" is declared local, since a page opened from file:// may not load the
// url('about:blank') MathJax declares by default (a console error on every page). The same
// settings as the report's pages (rbplab.report.pages).
window.MathJax = {
  tex2jax: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: false,
    processEnvironments: false,
    ignoreClass: ".*",
    processClass: "arithmatex",
  },
  messageStyle: "none",
  "HTML-CSS": {
    availableFonts: [],
    preferredFont: null,
    webFont: "STIX-Web",
    imageFont: null,
    styles: { "@font-face": { "font-family": "MathJax_Blank", src: "local('MathJax_Blank')" } },
  },
  SVG: { font: "STIX-Web" },
};
