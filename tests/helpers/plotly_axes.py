"""What a reader sees of a drawn plotly figure, read in the browser (the explorer and lab tests)."""

# Everything a reader sees of a figure's data that lies outside its axes, and its y axes with
# data but no labelled tick. Positions on a log axis are in decades; a value a log axis cannot
# draw (<= 0) is not drawn at all, and neither is a NaN.
OUTSIDE = """el => {
    const L = el._fullLayout, problems = [], withData = new Set();
    const coord = (ax, v) => ax.type === 'log' ? (v > 0 ? Math.log10(v) : NaN) : v;
    const inside = (ax, p) => {
        const lo = Math.min(...ax.range), hi = Math.max(...ax.range), tol = 1e-6 * (hi - lo);
        return p >= lo - tol && p <= hi + tol;
    };
    el._fullData.forEach((t, i) => {
        if (t.visible !== true || !t.x || !t.y) return;
        const xa = L[t.xaxis.replace('x', 'xaxis')], ya = L[t.yaxis.replace('y', 'yaxis')];
        let outside = 0, drawn = 0;
        for (let j = 0; j < Math.min(t.x.length, t.y.length); j++) {
            const x = coord(xa, +t.x[j]), y = coord(ya, +t.y[j]);
            if (t.x[j] === null || t.y[j] === null || !isFinite(x) || !isFinite(y)) continue;
            drawn++;
            if (!inside(xa, x) || !inside(ya, y)) outside++;
        }
        if (drawn) withData.add(ya._id);
        if (outside) problems.push(`trace ${i} (${t.name}): ${outside} of ${drawn} points outside `
            + `x ${JSON.stringify(xa.range)} / y ${JSON.stringify(ya.range)}`);
    });
    withData.forEach(id => {
        if (L[id.replace('y', 'yaxis')].showticklabels === false) return;  // beside a panel that has them
        const labels = Array.from(el.querySelectorAll(`g.${id}tick text`)).filter(t => t.textContent.trim());
        if (!labels.length) problems.push(`y axis ${id} has no labelled tick`);
    });
    return {title: L.title && L.title.text, problems};
}"""
