export { histogramValue, pointsOf, pointValue, testMeterProvider, type HistogramValue, type MetricPoint, type TestMeterProvider } from './metric-points.js';
