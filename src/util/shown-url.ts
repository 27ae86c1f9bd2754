/**
 * A URL as kvgate's messages, logs and APIs show it: without credentials (`user:password@`) and
 * without its query string, which may carry a token (`?…` says there was one). For the URLs an
 * operator configures (scrape URLs, the OTLP endpoint), which are printed wherever something about
 * them goes wrong: the log and `GET /workers` are read by more people than the config.
 */
export function shownUrl(url: string): string {
  let u: URL | undefined;
  try {
    u = new URL(url);
  } catch {
    u = undefined;
  }
  const query = /[?#]/.exec(url);
  if (u && u.host !== '') {
    u.username = '';
    u.password = '';
    u.search = '';
    u.hash = '';
    // As written: URL adds a '/' path to a bare origin (`http://host:4318`), which would show a
    // different URL from the one configured.
    const written = query ? url.slice(0, query.index) : url;
    const href = u.pathname === '/' && !written.endsWith('/') ? u.href.slice(0, -1) : u.href;
    return `${href}${query ? '?…' : ''}`;
  }
  // Not a URL with a host (`host:port`, or `user:pw@host:port` without a scheme): what runs up
  // to an `@` may be credentials, and the query string is cut as above.
  const base = query ? url.slice(0, query.index) : url;
  return `${base.slice(base.lastIndexOf('@') + 1)}${query ? '?…' : ''}`;
}
