/**
 * Route selection as Envoy's router does it: pick the virtual host by :authority, take the first
 * route whose path and header matchers all match, and resolve the cluster. For `cluster_header`
 * the header is read at match time (HeaderClusterSpecifierPlugin::route, source/common/router/
 * header_cluster_specifier.cc, builds a DynamicRouteEntry
 * holding the first value), so a later header change only matters if the route cache is cleared.
 */
import type { HeaderMatcher, Route, RouteConfig, VirtualHost } from './envoy-config.js';
import type { HeaderList } from './header-list.js';
import { stringMatches } from './mutations.js';

export interface RouteDecision {
  route: Route;
  virtualHost: string;
  /** The matched virtual host itself (its per-route filter config merges under the route's). */
  vhost: VirtualHost;
  /**
   * The cluster name the route picked at resolution time; '' when cluster_header named a missing
   * header (Envoy then answers cluster_not_found_response_code, since '' is no cluster).
   */
  cluster: string;
}

/** RouteMatcher::findVirtualHost: exact, then longest suffix wildcard, then prefix wildcard, then "*". */
function findVirtualHost(rc: RouteConfig, authority: string): VirtualHost | undefined {
  const host = authority.toLowerCase();
  let best: { vh: VirtualHost; len: number } | undefined;
  let prefixBest: { vh: VirtualHost; len: number } | undefined;
  let fallback: VirtualHost | undefined;
  for (const vh of rc.virtualHosts) {
    for (const d of vh.domains) {
      if (d === host) return vh;
      if (d === '*') fallback ??= vh;
      else if (d.startsWith('*') && host.endsWith(d.slice(1)) && host.length > d.length - 1) {
        if (!best || d.length > best.len) best = { vh, len: d.length };
      } else if (d.endsWith('*') && host.startsWith(d.slice(0, -1)) && host.length > d.length - 1) {
        if (!prefixBest || d.length > prefixBest.len) prefixBest = { vh, len: d.length };
      }
    }
  }
  return best?.vh ?? prefixBest?.vh ?? fallback;
}

/** HeaderUtility::matchHeaders (source/common/http/header_utility.cc). */
function headerMatches(m: HeaderMatcher, headers: HeaderList): boolean {
  const values = headers.getAll(m.name);
  if (m.present !== undefined) return ((values.length > 0) === m.present) !== m.invert;
  if (values.length === 0 && !m.treatMissingAsEmpty) return false;
  // Envoy joins repeated headers with "," before a string match.
  const joined = values.length === 0 ? '' : values.join(',');
  return (m.string ? stringMatches(m.string, joined) : true) !== m.invert;
}

/** The route entries' matchesPath: PrefixRouteEntryImpl, PathRouteEntryImpl, RegexRouteEntryImpl (source/common/router/config_impl.cc). */
function pathMatches(route: Route, rawPath: string): boolean {
  const { match } = route;
  const path = match.caseSensitive ? rawPath : rawPath.toLowerCase();
  const norm = (s: string): string => (match.caseSensitive ? s : s.toLowerCase());
  // `path` and `safe_regex` ignore the query string; `prefix` sees the whole :path.
  const noQuery = path.split(/[?#]/, 1)[0] ?? '';
  if (match.prefix !== undefined) return path.startsWith(norm(match.prefix));
  if (match.path !== undefined) return noQuery === norm(match.path);
  if (match.regex !== undefined) return match.regex.test(noQuery);
  return false;
}

/**
 * Resolves the route for these headers, or null (Envoy: 404 route_not_found):
 * RouteMatcher::route → VirtualHostImpl::getRouteFromEntries (config_impl.cc), first match wins.
 */
export function resolveRoute(rc: RouteConfig, headers: HeaderList): RouteDecision | null {
  const vh = findVirtualHost(rc, headers.get(':authority') ?? headers.get('host') ?? '');
  if (!vh) return null;
  const path = headers.get(':path') ?? '/';
  for (const route of vh.routes) {
    if (!pathMatches(route, path)) continue;
    if (!route.match.headers.every((m) => headerMatches(m, headers))) continue;
    let cluster = '';
    if (route.action.kind === 'cluster') cluster = route.action.cluster;
    else if (route.action.kind === 'cluster_header') cluster = headers.get(route.action.header) ?? '';
    return { route, virtualHost: vh.name, vhost: vh, cluster };
  }
  return null;
}
