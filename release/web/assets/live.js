// The page's live updates: the server sends the same fragment it drew the page with, rendered
// and escaped on the server, as server-sent events; this swaps it in. Without JavaScript the
// page is the one drawn at its load (reload for news).
"use strict";
(function () {
  var live = document.getElementById("live");
  var conn = document.getElementById("conn");
  if (!live || !window.EventSource) { return; }
  var updates = 0;
  var es = new EventSource(live.getAttribute("data-events"));
  es.addEventListener("page", function (e) {
    live.innerHTML = JSON.parse(e.data);
    updates++;
    document.body.setAttribute("data-updates", String(updates));
    if (conn) { conn.textContent = "live"; conn.className = "conn live"; }
  });
  es.onerror = function () {
    if (conn) { conn.textContent = "reconnecting…"; conn.className = "conn lost"; }
  };
})();
