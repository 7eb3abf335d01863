/*
 * main - the entry module of the Reflexor web UI, a chat over the Reflexor
 * HTTP/SSE API (SPEC §4, §7): wires the modules together and starts the page.
 *
 * Data flow:
 *   GET  .../sessions/:sid/moorex      one EventSource per tab: the session state
 *                                      (first event), inputs, effects, new states
 *   GET  .../sessions/:sid/messages/:m  fetch-streamed SSE per *streaming* answer:
 *                                      snapshot, chunks, complete|stopped
 *   POST .../sessions/:sid/moorex      user-send-message (client id, so a retry is
 *                                      idempotent), user-cancel, user-review-tool-call,
 *                                      user-set-tool-policy, user-configure
 *   GET  .../tools                     the tools, their servers and default policies
 *   GET  .../events                    the chat list live (one tab holds it for all)
 *   GET/PATCH .../sessions[?q=]        the list, search, rename; export, import;
 *   POST .../sessions/:sid/fork        edit and regenerate, read against .../history
 * The state is the truth; the only local extras are sends not yet in the state
 * (sending / failed), the text of answers still streaming, and the timeline.
 * Text from the network is only ever put in the DOM as textContent, or as
 * markdown rendered by marked and then sanitised by DOMPurify.
 *
 * Before any of that, the page asks the server (GET /client.json) for the
 * API prefix, whether it needs a token and its auth mode; api.js keeps them.
 *
 * Modules, each importing only from modules listed before it:
 *   format, dom, api      text formatting, DOM helpers, the HTTP client
 *   auth                  the access token / API key dialog (api.js asks
 *                         through it), who is signed in, sign out
 *   state                 the `ui` object, what follows from it, render requests
 *   markdown, settings    marked + DOMPurify; theme and remembered preferences
 *   tools                 the tool catalogue and this chat's permissions (a tab)
 *   inspector, controls   raw state, timeline, tools; status, buttons, sidebar, scroll
 *   forks                 which chats are versions of which (localStorage)
 *   search                the chat list's search box, served by the server
 *   sessions              the chat list: new, switch, rename, delete, the
 *                         results of a search, live across tabs
 *   transfer              export a chat to a file, import one
 *   composer              writing, sending, retrying, stopping
 *   chatsettings          this chat's system prompt, model, temperature
 *   streams               the session stream and the answer streams
 *   approvals             the card of a call awaiting approval, the waiting banner
 *   answer, versions      an answer's reasoning, usage, error, Stop mark;
 *                         edit, regenerate and the versions pager
 *   thread                messages and tool cards
 * Two calls go against that order, so they are set here: state draws with
 * render() below, and sessions follows a session with streams.followSession().
 */
import { configure } from './api.js';
import { bindApprovals, renderApprovalBanner } from './approvals.js';
import { bindAuth, showUser } from './auth.js';
import { bindChatSettings, renderSettingsButton } from './chatsettings.js';
import { bindComposer } from './composer.js';
import { bindControls, isNearBottom, renderControls, updateJump } from './controls.js';
import { $ } from './dom.js';
import { bindForks } from './forks.js';
import { bindInspector, renderInspector, restoreInspector } from './inspector.js';
import { bindSessions, openFirstSession, setFollower } from './sessions.js';
import { bindTheme, renderTheme } from './settings.js';
import { setRenderer, ui } from './state.js';
import { bindStreams, followSession } from './streams.js';
import { renderThread } from './thread.js';
import { bindTools, loadTools } from './tools.js';
import { bindTransfer } from './transfer.js';

const CONFIGURE_RETRY_MS = 2000;

/* Draw everything from `ui`; stay at the newest message if the reader was there. */
function render() {
  const box = $('messages');
  const nearBottom = isNearBottom();
  renderThread();
  renderApprovalBanner();
  renderControls();
  renderSettingsButton();
  renderInspector();
  if (ui.stickToBottom || nearBottom) box.scrollTop = box.scrollHeight;
  updateJump();
}

/* No API call before the server said where its API is: until it answers,
 * the page says it is connecting and asks again. */
async function reachServer() {
  for (;;) {
    try {
      await configure();
      return;
    } catch {
      await new Promise((r) => { setTimeout(r, CONFIGURE_RETRY_MS); });
    }
  }
}

async function start() {
  setRenderer(render);
  setFollower(followSession);
  bindAuth();
  bindComposer();
  bindSessions();
  bindTransfer();
  bindControls();
  bindInspector();
  bindTheme();
  bindStreams();
  bindTools();
  bindApprovals();
  bindForks();
  bindChatSettings();
  renderTheme();
  restoreInspector();
  renderControls();
  await reachServer();
  showUser();
  loadTools();
  await openFirstSession();
  if (matchMedia('(min-width: 721px)').matches) $('input').focus();
}

// Deferred classic scripts (marked, DOMPurify) have run before module scripts.
start();
