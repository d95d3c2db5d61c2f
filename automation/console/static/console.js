// The console's one script: live pages (server-sent events, then the page's <main> again), and a confirmation
// before each action. No inline script anywhere: the CSP allows this file only.
"use strict";

function confirmActions(root) {
  for (const form of root.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) {
        event.preventDefault();
      }
    });
  }
}

async function refresh(main) {
  const answer = await fetch(window.location.href, {headers: {"X-Console-Fragment": "1"}, credentials: "same-origin"});
  if (answer.status === 401) {
    window.location.assign("/login");
    return;
  }
  if (!answer.ok) {
    return;
  }
  const focused = document.activeElement && document.activeElement.id;
  main.innerHTML = await answer.text();
  main.dataset.updated = String(Date.now());
  confirmActions(main);
  if (focused) {
    const again = document.getElementById(focused);
    if (again) {
      again.focus();
    }
  }
}

function live(main) {
  const view = main.dataset.live;
  if (!view || !window.EventSource) {
    return;
  }
  const source = new EventSource("/events?view=" + encodeURIComponent(view));
  let busy = false;
  let again = false;
  source.addEventListener("change", async () => {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    do {
      again = false;
      await refresh(main);
    } while (again);
    busy = false;
  });
  source.addEventListener("signed-out", () => {
    source.close();
    window.location.assign("/login");
  });
  document.body.dataset.live = "connected";
  source.addEventListener("open", () => { document.body.dataset.stream = "open"; });
}

document.addEventListener("DOMContentLoaded", () => {
  const main = document.getElementById("main");
  confirmActions(document);
  if (main) {
    live(main);
  }
});
