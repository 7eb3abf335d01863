/*
 * settings - the preferences the page keeps in localStorage: the theme (light,
 * dark, or the system's when none was chosen) and whether the inspector was open.
 * Depends on dom.js only. ../theme.js applies the saved theme before the
 * first paint; this module switches it afterwards.
 * Storage may be disabled: then nothing is remembered, and nothing fails.
 */
import { $ } from './dom.js';

const THEME_KEY = 'reflexor.theme';          // also read by ../theme.js
const INSPECTOR_KEY = 'reflexor.inspector';

function effectiveTheme() {
  const t = document.documentElement.dataset.theme;
  if (t === 'light' || t === 'dark') return t;
  return matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

/* The toggle offers the theme that is not showing. */
export function renderTheme() {
  const dark = effectiveTheme() === 'dark';
  $('theme-label').textContent = dark ? 'Light mode' : 'Dark mode';
  $('theme-toggle').setAttribute('aria-label', dark ? 'Switch to light mode' : 'Switch to dark mode');
}

export function bindTheme() {
  $('theme-toggle').addEventListener('click', () => {
    const next = effectiveTheme() === 'dark' ? 'light' : 'dark';
    document.documentElement.dataset.theme = next;
    try { localStorage.setItem(THEME_KEY, next); } catch { /* ignore */ }
    renderTheme();
  });
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', renderTheme);
}

export function inspectorWasOpen() {
  try { return localStorage.getItem(INSPECTOR_KEY) === '1'; } catch { return false; }
}

export function rememberInspector(open) {
  try { localStorage.setItem(INSPECTOR_KEY, open ? '1' : '0'); } catch { /* ignore */ }
}
