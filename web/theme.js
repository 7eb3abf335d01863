/* Apply the saved theme before the first paint, so a reload never flashes. */
(function () {
  try {
    var t = localStorage.getItem('reflexor.theme');
    if (t === 'light' || t === 'dark') document.documentElement.dataset.theme = t;
  } catch (e) { /* storage may be disabled */ }
})();
