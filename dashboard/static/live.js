// Refreshes the overview's live part every 5 seconds without reloading
// the page: the same HTML the server renders, fetched and swapped in.
(function () {
  const live = document.getElementById("live");
  if (!live) return;
  setInterval(async function () {
    try {
      const res = await fetch(live.dataset.src, { credentials: "same-origin" });
      if (res.ok) live.innerHTML = await res.text();
    } catch (e) { /* the next tick tries again */ }
  }, 5000);
})();
