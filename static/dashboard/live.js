// Live pages reconnect quickly after the web process or Redis comes back: at most ~2 s
// between attempts (the websocket extension's default backs off to a minute).
htmx.config.wsReconnectDelay = function (retryCount) {
  var base = Math.min(2000, 250 * Math.pow(2, retryCount));
  return base / 2 + Math.random() * (base / 2);
};
